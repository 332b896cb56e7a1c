package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestWarmPoolThroughAPI sets a pool with the admin route, waits for it to
// fill, creates a sandbox through the API (a pool hit), and sees the pool
// refill.
func TestWarmPoolThroughAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	n, tmpl, reg, closeNode, err := fakeNode(ctx, t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeNode)
	pl, ok := n.(nodeapi.Pooler)
	if !ok {
		t.Fatal("the node agent is not a Pooler")
	}
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: n})
	if err != nil {
		t.Fatal(err)
	}
	const admin = "admin-secret"
	api, err := apiserver.New(apiserver.Config{Store: st, Lifecycle: lc, Templates: tmpl, AdminToken: admin, Pools: pl})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	if err := st.CreateTeam(ctx, &store.Team{ID: "t1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	key, _, err := apiserver.AddKey(ctx, st, "t1", "test", "")
	if err != nil {
		t.Fatal(err)
	}
	adminDo := func(method, path, body string) (int, []apiserver.PoolStatus) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-Admin-Token", admin)
		req.Header.Set("X-Team-ID", "t1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []apiserver.PoolStatus
		if method == http.MethodGet {
			json.NewDecoder(resp.Body).Decode(&out)
		}
		return resp.StatusCode, out
	}
	for _, tc := range []struct{ body string }{{`{}`}, {`{"size": -1}`}, {`{"size": 1000}`}} {
		if code, _ := adminDo(http.MethodPut, "/admin/templates/base/pool", tc.body); code != http.StatusBadRequest {
			t.Errorf("PUT pool %s: %d, want 400", tc.body, code)
		}
	}
	if code, _ := adminDo(http.MethodPut, "/admin/templates/nosuch/pool", `{"size": 1}`); code != http.StatusNotFound {
		t.Errorf("PUT pool of an unknown template: %d, want 404", code)
	}
	if code, _ := adminDo(http.MethodPut, "/admin/templates/base/pool", `{"size": 1}`); code != http.StatusOK {
		t.Fatalf("PUT pool: %d", code)
	}
	waitReady := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, pools := adminDo(http.MethodGet, "/admin/pools", "")
			if len(pools) == 1 && pools[0].Ready == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool not ready within 30 s: %+v", pools)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitReady()
	agent := n.(*node.Agent)
	c := client.New(srv.URL, key)
	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := agent.Get(ctx, sb.SandboxID)
	if err != nil || got.TeamID != "t1" {
		t.Fatalf("node's view of the created sandbox: %+v, %v", got, err)
	}
	if hits := counterOf(t, reg, "hit"); hits != 1 {
		t.Errorf("pool hits %v, want 1 (the create claimed the member)", hits)
	}
	waitReady()
	if _, err := c.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
}

// counterOf returns sandbox_pool_claims_total{template="base",result}.
func counterOf(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sandbox_pool_claims_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no sandbox_pool_claims_total{result=%q}", result)
	return 0
}
