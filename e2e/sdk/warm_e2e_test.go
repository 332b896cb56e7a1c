//go:build e2e

package sdke2e

import (
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
)

// TestSDKFlowWarmPool runs the SDK flow against a server with a warm pool
// of base (--pool-size 2): the flow's create claims a ready member, and
// everything the SDK does with it works as with a started sandbox.
func TestSDKFlowWarmPool(t *testing.T) {
	e2eserve.Prerequisites(t)
	const admin = "warm-e2e-admin-0123456789abcdef012345"
	s := e2eserve.Start(t, e2eserve.Options{DataDir: t.TempDir(), APIKey: apiKey, AdminToken: admin, Isolation: iso,
		ExtraArgs: []string{"--pool-size", "2"}})
	url := s.Env["E2B_API_URL"]
	e2eserve.WaitPoolReady(t, url, admin, "base", 2, 5*time.Minute)
	out := s.Node(t, "flow.mjs")
	if !strings.Contains(out, "OK") {
		t.Fatalf("flow did not finish:\n%s", out)
	}
	if hits := e2eserve.Pool(t, url, admin, "base").Hits; hits < 1 {
		t.Errorf("the flow's creates took no pool member (hits %d)", hits)
	}
}
