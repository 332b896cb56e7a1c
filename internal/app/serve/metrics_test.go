package serve

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestMetricsEndpoint composes the API as serve does (node agent over the
// fake driver, lifecycle, API on one registry), drives a sandbox through
// its life and checks that GET /metrics parses with the Prometheus text
// parser and carries the series operators rely on.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	n, tmpl, reg, closeNode, err := fakeNode(ctx, t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeNode)
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: n, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { lc.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	const admin = "admin-secret"
	api, err := apiserver.New(apiserver.Config{
		Store: st, Lifecycle: lc, Templates: tmpl, AdminToken: admin,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Registry: reg,
	})
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
	c := client.New(srv.URL, key)
	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Connect(ctx, sb.SandboxID, 60); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "nosuchsandbox"); err == nil {
		t.Fatal("get of an unknown sandbox succeeded")
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	// has reports whether family name has a series with every label given.
	has := func(name string, labels map[string]string) bool {
		mf, ok := mfs[name]
		if !ok {
			return false
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
				if l.GetName() == "sandbox_id" {
					t.Errorf("%s has a sandbox_id label", name)
				}
			}
			for k, v := range labels {
				if got[k] != v {
					continue metrics
				}
			}
			return true
		}
		return false
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{
		{"node_sandboxes", map[string]string{"state": "running"}},
		{"node_sandboxes", map[string]string{"state": "paused"}},
		{"node_sandbox_health", map[string]string{"health": "healthy"}},
		{"sandbox_operation_duration_seconds", map[string]string{"op": "create", "result": "ok"}},
		{"sandbox_operation_duration_seconds", map[string]string{"op": "pause", "result": "ok"}},
		{"sandbox_operation_duration_seconds", map[string]string{"op": "resume", "result": "ok"}},
		{"sandbox_operation_duration_seconds", map[string]string{"op": "fork"}},
		{"sandbox_killed_total", map[string]string{"kill_reason": "request"}},
		{"sandbox_guest_mem_used_bytes", nil},
		{"sandbox_watchdog_probes_total", map[string]string{"result": "stale"}},
		{"node_capacity_cpus", nil},
		{"node_capacity_memory_bytes", nil},
		{"node_disk_free_bytes", nil},
		{"node_sandbox_vcpus", nil},
		{"node_sandbox_memory_bytes", nil},
		{"sandbox_leaked_objects_reclaimed_total", map[string]string{"kind": "cgroup"}},
		{"api_http_requests_total", map[string]string{"route": "POST /v2/sandboxes", "method": "POST", "status": "201"}},
		{"api_http_requests_total", map[string]string{"route": "GET /sandboxes/{id}", "method": "GET", "status": "404"}},
		{"api_http_request_duration_seconds", map[string]string{"route": "DELETE /sandboxes/{id}"}},
	} {
		if tc.name == "sandbox_guest_mem_used_bytes" {
			// A histogram vector shows only once a template has a sample;
			// its presence is checked by the node's watchdog tests.
			continue
		}
		if !has(tc.name, tc.labels) {
			var seen []string
			for _, m := range mfs[tc.name].GetMetric() {
				seen = append(seen, m.String())
			}
			t.Errorf("/metrics lacks %s%v; has %v", tc.name, tc.labels, seen)
		}
	}
	if mf := mfs["sandbox_operation_duration_seconds"]; mf != nil && mf.GetType().String() != "HISTOGRAM" {
		t.Errorf("sandbox_operation_duration_seconds is a %s, want a histogram", mf.GetType())
	}
}
