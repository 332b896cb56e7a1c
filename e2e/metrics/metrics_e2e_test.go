//go:build e2e

package metricse2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/pkg/client"
)

// iso names the host objects of this test process's servers; a restarted
// server gets the same.
var iso = e2eserve.NewIsolation("metrics", "100.68.0.0/16", "wm")

// TestMain removes the isolated cgroup root and nftables table at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, iso) }

const (
	apiKey     = "e2b_a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3"
	adminToken = "e2e-metrics-admin-0123456789abcdef"
)

// startServe runs warren serve on a free port with its state in dataDir.
func startServe(t testing.TB, dataDir string) *e2eserve.Server {
	t.Helper()
	return e2eserve.Start(t, e2eserve.Options{DataDir: dataDir, APIKey: apiKey, AdminToken: adminToken, Isolation: iso})
}

// TestGetMetrics creates a sandbox with the SDK and polls getMetrics()
// (instance and static) until it returns samples; they must come within
// 30 s of the create and carry CPU, memory and disk figures.
func TestGetMetrics(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := startServe(t, t.TempDir())
	out := s.Node(t, "metrics.mjs")
	if !strings.Contains(out, "OK") {
		t.Fatalf("metrics flow did not finish:\n%s", out)
	}
	t.Logf("%s", out)
}

// TestWatchdogHealth checks the watchdog against a real sandbox: within
// 90 s of its create (probes every 25-40 s) the sandbox detail reads
// healthy, and /metrics has a guest memory sample from envd's answer.
func TestWatchdogHealth(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := startServe(t, t.TempDir())
	ctx := context.Background()
	c := client.New(s.Env["E2B_API_URL"], apiKey)
	timeout := 300
	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Timeout: &timeout})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		d, err := c.Get(ctx, sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Health == "healthy" {
			break
		}
		if d.Health != "unknown" || time.Now().After(deadline) {
			t.Fatalf("health %q %s after create, want healthy", d.Health, time.Since(deadline.Add(-90*time.Second)))
		}
		time.Sleep(time.Second)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.Env["E2B_API_URL"]+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	var samples uint64
	var sum float64
	for _, m := range mfs["sandbox_guest_mem_used_bytes"].GetMetric() {
		samples += m.GetHistogram().GetSampleCount()
		sum += m.GetHistogram().GetSampleSum()
	}
	if samples == 0 || sum <= 0 {
		t.Fatalf("sandbox_guest_mem_used_bytes: %d samples, sum %v; want a reading from the accepted probe", samples, sum)
	}
	t.Logf("guest memory: %d samples, mean %.0f MiB", samples, sum/float64(samples)/(1<<20))
	if _, err := c.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
}
