package noderpc_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

func TestMuxMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a, err := node.New(context.Background(), node.Config{
		DataDir: t.TempDir(), Driver: fake.New(fake.Config{}), Cgroups: nodetest.NewCgroups(), Net: nodetest.NewNet(),
		Layers: nodetest.NewLayers(), Envd: &nodetest.Envd{}, ReclaimInterval: -1, Registry: reg,
		FreeDisk: func(string) (uint64, error) { return 1 << 40, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	const token = "node-secret"
	own := nodeapi.Template{ID: "t", RootFS: "/rootfs"}
	resolve := func(context.Context, string, nodeapi.Template) (nodeapi.Template, error) { return own, nil }
	srv := httptest.NewServer(noderpc.NewMux(a, noderpc.Options{Token: token, ResolveTemplate: resolve}, reg))
	t.Cleanup(srv.Close)

	// The RPCs are served beside /metrics, health included.
	c := nodeclient.New(srv.URL, nodeclient.Options{HTTPClient: srv.Client(), Token: token})
	sb, err := c.Create(t.Context(), nodeapi.CreateRequest{ID: "sb1", Template: own})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Health != nodeapi.HealthUnknown {
		t.Errorf("health over RPC = %q, want unknown before any probe", sb.Health)
	}

	for _, tc := range []struct {
		name   string
		auth   string
		status int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", "Bearer nope", http.StatusUnauthorized},
		{"token", "Bearer " + token, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/metrics", nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.status != http.StatusOK {
				return
			}
			p := expfmt.NewTextParser(model.UTF8Validation)
			mfs, err := p.TextToMetricFamilies(resp.Body)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			for _, name := range []string{"node_sandboxes", "node_sandbox_health", "sandbox_operation_duration_seconds", "node_capacity_cpus", "sandbox_leaked_objects_reclaimed_total"} {
				if _, ok := mfs[name]; !ok {
					t.Errorf("node /metrics lacks %s", name)
				}
			}
		})
	}
}

func TestHealthConversion(t *testing.T) {
	t.Parallel()
	for _, h := range []nodeapi.Health{nodeapi.HealthHealthy, nodeapi.HealthUnhealthy, nodeapi.HealthUnknown, ""} {
		t.Run(string(h), func(t *testing.T) {
			out, err := noderpc.SandboxFromProto(noderpc.SandboxToProto(&nodeapi.Sandbox{ID: "sb1", State: "running", Health: h}))
			if err != nil {
				t.Fatal(err)
			}
			want := h
			if want == "" {
				want = nodeapi.HealthUnknown
			}
			if out.Health != want {
				t.Errorf("health %q after the round trip, want %q", out.Health, want)
			}
		})
	}
}
