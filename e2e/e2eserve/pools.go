package e2eserve

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

// PoolStatus is a template's warm pool as GET /admin/pools lists it.
type PoolStatus struct {
	TemplateID string `json:"templateID"`
	Size       int64  `json:"size"`
	Ready      int64  `json:"ready"`
	Hits       int64  `json:"hits"`
}

// Pool returns the warm pool of templateID on the server at apiURL (its
// admin token given), failing the test when there is none.
func Pool(t testing.TB, apiURL, adminToken, templateID string) PoolStatus {
	t.Helper()
	c := client.New(apiURL, "")
	c.Header.Set("X-Admin-Token", adminToken)
	var pools []PoolStatus
	if _, _, err := c.Do(context.Background(), http.MethodGet, "/admin/pools", nil, &pools); err != nil {
		t.Fatal(err)
	}
	for _, p := range pools {
		if p.TemplateID == templateID {
			return p
		}
	}
	t.Fatalf("no warm pool of %s: %+v", templateID, pools)
	return PoolStatus{}
}

// WaitPoolReady waits (within limit) until templateID's warm pool has at
// least ready members.
func WaitPoolReady(t testing.TB, apiURL, adminToken, templateID string, ready int64, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for p := Pool(t, apiURL, adminToken, templateID); p.Ready < ready; p = Pool(t, apiURL, adminToken, templateID) {
		if time.Now().After(deadline) {
			t.Fatalf("warm pool of %s: %d ready after %s, want %d", templateID, p.Ready, limit, ready)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
