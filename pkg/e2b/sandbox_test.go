package e2b

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

// TestConfigResolve reads the E2B_* variables when options are unset,
// lets options win, refuses a missing key, and builds envd URLs as the
// other SDKs do.
func TestConfigResolve(t *testing.T) {
	t.Setenv("E2B_API_KEY", "")
	t.Setenv("E2B_API_URL", "")
	t.Setenv("E2B_SANDBOX_URL", "")
	t.Setenv("E2B_DOMAIN", "")
	if _, err := (Config{}).resolve(); !errors.Is(err, ErrNoAPIKey) {
		t.Fatalf("no key: %v, want ErrNoAPIKey", err)
	}
	c, err := Config{APIKey: "k"}.resolve()
	if err != nil || c.APIURL != "https://api.e2b.app" || c.RequestTimeout != DefaultRequestTimeout {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if u := c.envdURL("abc", ""); u != "https://sandbox.e2b.app" {
		t.Errorf("shared-host domain envd URL %s", u)
	}
	if u := c.directEnvdURL("abc", ""); u != "https://49983-abc.e2b.app" {
		t.Errorf("direct envd URL %s", u)
	}
	if u := c.envdURL("abc", "my.example"); u != "https://49983-abc.my.example" {
		t.Errorf("own domain envd URL %s", u)
	}

	t.Setenv("E2B_API_KEY", "env-key")
	t.Setenv("E2B_DOMAIN", "warren.local")
	t.Setenv("E2B_SANDBOX_URL", "http://127.0.0.1:3001/")
	c, err = Config{}.resolve()
	if err != nil || c.APIKey != "env-key" || c.APIURL != "https://api.warren.local" || c.SandboxURL != "http://127.0.0.1:3001" {
		t.Fatalf("from env: %+v %v", c, err)
	}
	if u := c.envdURL("abc", ""); u != "http://127.0.0.1:3001" {
		t.Errorf("sandbox URL override: %s", u)
	}
	t.Setenv("E2B_API_URL", "http://127.0.0.1:3000/")
	c, _ = Config{APIKey: "opt-key", Domain: "opt.dom"}.resolve()
	if c.APIKey != "opt-key" || c.Domain != "opt.dom" || c.APIURL != "http://127.0.0.1:3000" {
		t.Fatalf("options win: %+v", c)
	}
}

// TestSandboxLifecycle creates a sandbox with every option the REST API
// takes, then reads, times out, pauses, resumes, lists (in pages) and
// kills it through the fake API; a fork returns what it made and why
// the rest failed.
func TestSandboxLifecycle(t *testing.T) {
	t.Parallel()
	api, cfg := newServer(t)
	ctx := context.Background()
	allow := false
	sb, err := Create(ctx, CreateOptions{Config: cfg, Template: "py", Timeout: 90*time.Second + time.Millisecond,
		Env: map[string]string{"A": "1"}, Metadata: map[string]string{"owner": "unit"}, AllowInternetAccess: &allow,
		Network: &Network{AllowOut: []string{"1.1.1.1"}}, Lifecycle: &Lifecycle{OnTimeout: "pause", AutoResume: true}})
	if err != nil {
		t.Fatal(err)
	}
	got := api.creates[0]
	if got.TemplateID != "py" || *got.Timeout != 91 || got.EnvVars["A"] != "1" || got.Metadata["owner"] != "unit" ||
		*got.AllowInternetAccess || got.Network.AllowOut[0] != "1.1.1.1" || !*got.AutoPause || !got.AutoResume.Enabled {
		t.Fatalf("create request %+v", got)
	}
	if sb.ID != "sbx1" || sb.Domain != "unit.test" || sb.Host(8080) != "8080-sbx1.unit.test" {
		t.Fatalf("sandbox %+v host %s", sb, sb.Host(8080))
	}
	if _, err := Create(ctx, CreateOptions{Config: cfg, Lifecycle: &Lifecycle{OnTimeout: "sleep"}}); err == nil {
		t.Fatal("bad lifecycle accepted")
	}

	info, err := sb.Info(ctx)
	if err != nil || info.TemplateID != "py" || info.State != "running" {
		t.Fatalf("info %+v %v", info, err)
	}
	if err := sb.SetTimeout(ctx, 2*time.Minute); err != nil || api.timeouts["sbx1"] != 120 {
		t.Fatalf("set timeout: %v %v", err, api.timeouts)
	}
	if ok, err := sb.Pause(ctx); !ok || err != nil {
		t.Fatalf("pause: %v %v", ok, err)
	}
	if ok, err := sb.Pause(ctx); ok || err != nil {
		t.Fatalf("second pause: %v %v, want false", ok, err)
	}
	if running, err := sb.IsRunning(ctx); running || err != nil {
		t.Fatalf("paused sandbox running: %v %v", running, err)
	}
	if err := sb.Resume(ctx, 0); err != nil || api.timeouts["sbx1"] != 300 {
		t.Fatalf("resume: %v %v", err, api.timeouts)
	}
	if running, err := sb.IsRunning(ctx); !running || err != nil {
		t.Fatalf("resumed sandbox not running: %v %v", running, err)
	}
	again, err := Connect(ctx, sb.ID, ConnectOptions{Config: cfg, Timeout: time.Minute})
	if err != nil || again.ID != sb.ID || api.timeouts["sbx1"] != 60 {
		t.Fatalf("connect: %+v %v", again, err)
	}

	for range 2 {
		if _, err := Create(ctx, CreateOptions{Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	token := ""
	for pages := 0; ; pages++ {
		page, next, err := List(ctx, ListOptions{Config: cfg, Limit: 2, NextToken: token})
		if err != nil || pages > 3 {
			t.Fatalf("list: %v after %d pages", err, pages)
		}
		for _, s := range page {
			ids = append(ids, s.SandboxID)
		}
		if token = next; token == "" {
			break
		}
	}
	if len(ids) != 3 || ids[0] != "sbx1" || ids[2] != "sbx3" {
		t.Fatalf("listed %v", ids)
	}

	forks, err := sb.Fork(ctx, 2, time.Minute)
	var ae *client.APIError
	if len(forks) != 1 || forks[0].ID != "sbx4" || !errors.As(err, &ae) || ae.Status != 429 {
		t.Fatalf("fork: %+v %v", forks, err)
	}
	if r, err := forks[0].Commands.Run(ctx, "echo forked", RunOptions{}); err != nil || r.Stdout != "forked\n" {
		t.Fatalf("command in a fork: %+v %v", r, err)
	}

	if ok, err := sb.Kill(ctx); !ok || err != nil {
		t.Fatalf("kill: %v %v", ok, err)
	}
	if ok, err := Kill(ctx, sb.ID, cfg); ok || err != nil {
		t.Fatalf("second kill: %v %v, want false", ok, err)
	}
	if _, err := sb.Info(ctx); !IsNotFound(err) {
		t.Fatalf("info after kill: %v, want not found", err)
	}
	if _, err := Create(ctx, CreateOptions{Config: Config{APIKey: "wrong", APIURL: cfg.APIURL}}); err == nil {
		t.Fatal("wrong key accepted")
	}
}
