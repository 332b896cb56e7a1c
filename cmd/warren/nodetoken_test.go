package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// TestNodeTokenCommands: `warren node token create|list|revoke` through
// the admin routes of the node credentials (as warren api mounts them),
// and `credential` from the token's file.
func TestNodeTokenCommands(t *testing.T) {
	t.Parallel()
	creds, err := nodereg.NewCredentials(storetest.SQLite(t), "cmd-token-test-credential-key-0123456789", nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	creds.AdminRoutes(func(p string, h http.Handler) {
		mux.Handle(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Admin-Token") != "adm" {
				http.Error(w, `{"message":"invalid admin token"}`, http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		}))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	run := func(args ...string) (string, string, error) {
		node := &cobra.Command{Use: "node", SilenceUsage: true, SilenceErrors: true}
		addNodeTokenCommands(node)
		var out, errOut bytes.Buffer
		node.SetOut(&out)
		node.SetErr(&errOut)
		node.SetArgs(args)
		err := node.ExecuteContext(context.Background())
		return out.String(), errOut.String(), err
	}
	api := []string{"--url", srv.URL, "--admin-token", "adm"}
	out, note, err := run(append([]string{"token", "create", "node-1", "--name", "first"}, api...)...)
	tok := strings.TrimSpace(out)
	if err != nil || !nodeauth.ValidToken(tok) || !strings.Contains(note, "revoke") {
		t.Fatalf("token create: %q %q %v", out, note, err)
	}
	id, _ := nodeauth.TokenID(tok)
	out, _, err = run(append([]string{"token", "list", "node-1"}, api...)...)
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "first") || strings.Contains(out, tok) {
		t.Fatalf("token list: %q %v", out, err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err = run("token", "credential", "--node-token-file", file)
	if err != nil || strings.TrimSpace(out) != nodeauth.Credential(tok, nodeauth.PurposeMetrics) {
		t.Fatalf("token credential: %q %v", out, err)
	}
	if _, _, err := run("token", "credential", "--node-token-file", file, "--purpose", nodeauth.PurposeRPC); err == nil {
		t.Error("token credential printed the control plane's RPC credential")
	}
	if _, _, err := run(append([]string{"token", "revoke", "node-2", id}, api...)...); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("revoke through another node: %v, want 404", err)
	}
	out, _, err = run(append([]string{"token", "revoke", "node-1", id}, api...)...)
	if err != nil || !strings.Contains(out, "revoked") {
		t.Fatalf("token revoke: %q %v", out, err)
	}
	if _, _, err := run("token", "list", "node-1", "--url", srv.URL, "--admin-token", "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("list with a wrong admin token: %v", err)
	}
}
