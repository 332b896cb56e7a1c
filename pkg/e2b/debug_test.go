package e2b

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"

	envdsrv "github.com/warren-sandbox/warren/internal/envd"
)

// TestDebugMode talks to an envd alone: no API key, no API calls, the
// debug sandbox's ID, kill and set-timeout doing nothing.
func TestDebugMode(t *testing.T) {
	t.Parallel()
	cfg := envdsrv.DefaultConfig()
	cfg.PortForward, cfg.Init = false, false
	srv, err := envdsrv.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(hostHome(t, srv.Handler()))
	defer hs.Close()
	ctx := context.Background()
	// The API URL points at envd: any REST call would fail with a 404.
	dc := Config{Debug: true, SandboxURL: hs.URL, APIURL: hs.URL}
	sb, err := Create(ctx, CreateOptions{Config: dc})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "debug_sandbox_id" || sb.EnvdVersion != "99.99.99" || sb.Host(8080) != "localhost:8080" {
		t.Fatalf("debug sandbox %+v host %s", sb, sb.Host(8080))
	}
	if r, err := sb.Commands.Run(ctx, "echo debug", RunOptions{}); err != nil || r.Stdout != "debug\n" {
		t.Fatalf("run: %+v %v", r, err)
	}
	if err := sb.SetTimeout(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if m, err := sb.Metrics(ctx, MetricsOptions{}); err != nil || len(m) != 0 {
		t.Fatalf("metrics %v %v", m, err)
	}
	if ok, err := sb.Kill(ctx); !ok || err != nil {
		t.Fatalf("kill %v %v", ok, err)
	}
	c, _ := Config{Debug: true}.resolve()
	if c.envdURL("x", "") != "http://localhost:49983" || c.APIURL != "http://localhost:3000" {
		t.Fatalf("debug defaults %+v %s", c, c.envdURL("x", ""))
	}
}
