//go:build e2e

package sdke2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestSDKFlowWarmPool runs the SDK flow against a server with a warm pool
// of base (--pool-size 2): the flow's create claims a ready member, and
// everything the SDK does with it works as with a started sandbox.
func TestSDKFlowWarmPool(t *testing.T) {
	e2eserve.Prerequisites(t)
	const admin = "warm-e2e-admin"
	s := e2eserve.Start(t, e2eserve.Options{DataDir: t.TempDir(), APIKey: apiKey, AdminToken: admin, Isolation: iso,
		ExtraArgs: []string{"--pool-size", "2"}})
	c := client.New(s.Env["E2B_API_URL"], "")
	c.Header.Set("X-Admin-Token", admin)
	pool := func() (ready, hits int64) {
		t.Helper()
		var pools []struct {
			TemplateID string `json:"templateID"`
			Ready      int64  `json:"ready"`
			Hits       int64  `json:"hits"`
		}
		if _, _, err := c.Do(context.Background(), http.MethodGet, "/admin/pools", nil, &pools); err != nil {
			t.Fatal(err)
		}
		for _, p := range pools {
			if p.TemplateID == "base" {
				return p.Ready, p.Hits
			}
		}
		t.Fatalf("no base pool: %+v", pools)
		return 0, 0
	}
	deadline := time.Now().Add(5 * time.Minute)
	for ready, _ := pool(); ready < 2; ready, _ = pool() {
		if time.Now().After(deadline) {
			t.Fatalf("base pool not full within 5 minutes (ready %d)", ready)
		}
		time.Sleep(200 * time.Millisecond)
	}
	out := s.Node(t, "flow.mjs")
	if !strings.Contains(out, "OK") {
		t.Fatalf("flow did not finish:\n%s", out)
	}
	if _, hits := pool(); hits < 1 {
		t.Errorf("the flow's creates took no pool member (hits %d)", hits)
	}
}
