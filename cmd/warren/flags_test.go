package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

var update = flag.Bool("update", false, "rewrite testdata/role-flags.txt from the commands")

// TestRoleFlags holds the flags of the three roles (serve, api, node) to
// testdata/role-flags.txt: name, type, default, usage and deprecation of
// each. A change of any of them shows there in review; regenerate with
// go test ./cmd/warren -run TestRoleFlags -update.
func TestRoleFlags(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	root := newRoot(io.Discard, io.Discard)
	for _, name := range []string{"serve", "api", "node"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name {
			t.Fatalf("command %s: %v", name, err)
		}
		fmt.Fprintf(&b, "== warren %s\n", name)
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			fmt.Fprintf(&b, "--%s %s default=%q", f.Name, f.Value.Type(), f.DefValue)
			if f.Shorthand != "" {
				fmt.Fprintf(&b, " short=%s", f.Shorthand)
			}
			if f.Deprecated != "" {
				fmt.Fprintf(&b, " deprecated=%q", f.Deprecated)
			}
			if f.Hidden {
				b.WriteString(" hidden")
			}
			fmt.Fprintf(&b, "\n\t%s\n", f.Usage)
		})
	}
	golden := filepath.Join("testdata", "role-flags.txt")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("the role flags changed (regenerate with -update if on purpose):\n%s", lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
