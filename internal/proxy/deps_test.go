package proxy_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProxyLinksNoLifecycle holds the edge proxy to its contract with what
// routes it (internal/route): it links neither the lifecycle nor the store
// and its database drivers, so that it can be reasoned about (and run) apart
// from them.
func TestProxyLinksNoLifecycle(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/warren-sandbox/warren/internal/"
	for _, d := range strings.Fields(string(out)) {
		for _, f := range []string{"lifecycle", "store", "placement"} {
			if d == module+f || strings.HasPrefix(d, module+f+"/") {
				t.Errorf("internal/proxy links %s", d)
			}
		}
		if strings.HasPrefix(d, "modernc.org/sqlite") || strings.HasPrefix(d, "github.com/jackc/pgx") {
			t.Errorf("internal/proxy links the database driver %s", d)
		}
	}
}
