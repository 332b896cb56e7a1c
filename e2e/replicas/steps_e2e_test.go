//go:build e2e

package replicas

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// steps runs steps.mjs with the real SDK against the replica at base and
// returns its output; a failed step fails the test.
func steps(t *testing.T, base string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"steps.mjs"}, args...)...)
	cmd.Env = append(os.Environ(), "E2B_API_URL="+base, "E2B_SANDBOX_URL="+base, "E2B_API_KEY="+apiKey)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("steps.mjs %s against %s: %v\n%s", strings.Join(args, " "), base, err, out)
	}
	return string(out)
}

// createVia creates n sandboxes through the replica at base.
func createVia(t *testing.T, base string, n int) []string {
	t.Helper()
	out := steps(t, base, "create", fmt.Sprint(n))
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "ids "); ok {
			var ids []string
			if err := json.Unmarshal([]byte(rest), &ids); err != nil {
				t.Fatal(err)
			}
			return ids
		}
	}
	t.Fatalf("create printed no ids:\n%s", out)
	return nil
}
