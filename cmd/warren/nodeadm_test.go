package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// runNodeAdmin runs a node admin subcommand under a `node` command as
// warren node would register them.
func runNodeAdmin(t *testing.T, args ...string) (string, error) {
	t.Helper()
	node := &cobra.Command{Use: "node", SilenceUsage: true, SilenceErrors: true}
	addNodeAdminCommands(node)
	var out bytes.Buffer
	node.SetOut(&out)
	node.SetErr(&out)
	node.SetArgs(args)
	err := node.ExecuteContext(context.Background())
	return out.String(), err
}

// TestNodeAdminCommands: against warren serve, `node list` shows its one
// local node; cordon, drain and uncordon change its status; an unknown
// node and a wrong admin token are errors.
func TestNodeAdminCommands(t *testing.T) {
	t.Parallel()
	env, stop := startServe(t, t.TempDir(), "--admin-token", "adm-0123456789abcdef0123456789abcdef")
	defer stop()
	api := []string{"--url", env["E2B_API_URL"], "--admin-token", "adm-0123456789abcdef0123456789abcdef"}
	out, err := runNodeAdmin(t, append([]string{"list"}, api...)...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "local ") || !strings.Contains(lines[1], " ready ") {
		t.Fatalf("node list:\n%s", out)
	}
	for _, c := range []struct{ action, want string }{{"cordon", "cordoned"}, {"drain", "draining"}, {"uncordon", "ready"}} {
		out, err := runNodeAdmin(t, append([]string{c.action, "local"}, api...)...)
		if err != nil || strings.TrimSpace(out) != "node local: "+c.want {
			t.Fatalf("node %s local: %q, %v", c.action, out, err)
		}
	}
	if _, err := runNodeAdmin(t, append([]string{"drain", "nope"}, api...)...); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("drain of an unknown node: %v", err)
	}
	if _, err := runNodeAdmin(t, "list", "--url", env["E2B_API_URL"], "--admin-token", "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("list with a wrong token: %v", err)
	}
}
