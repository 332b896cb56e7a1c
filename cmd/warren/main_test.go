package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

// serve runs `warren serve --driver fake` in process on a free port and
// returns its printed exports and a stop function that waits for a clean
// exit.
func serve(t *testing.T, dataDir string, extra ...string) (map[string]string, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var out, errb syncBuffer
	root := newRoot(&out, &errb)
	root.SetArgs(append([]string{"serve", "--driver", "fake", "--data-dir", dataDir, "--listen", addr}, extra...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "E2B_SANDBOX_URL") {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed nothing: %s", errb.String())
		}
	}
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`export (\w+)=(\S+)`).FindAllStringSubmatch(out.String(), -1) {
		env[m[1]] = m[2]
	}
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("serve did not stop")
		}
	}
	return env, stop
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := "e2b_" + strings.Repeat("0123456789", 4)
	env, stop := serve(t, dir, "--api-key", key, "--admin-token", "adm")
	if env["E2B_API_KEY"] != key || env["E2B_API_URL"] == "" || env["E2B_SANDBOX_URL"] != env["E2B_API_URL"] {
		t.Fatalf("exports = %v", env)
	}
	ctx := context.Background()
	c := client.New(env["E2B_API_URL"], key)
	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	list, _, err := c.List(ctx, client.ListOptions{Metadata: map[string]string{"k": "v"}})
	if err != nil || len(list) != 1 || list[0].SandboxID != sb.SandboxID {
		t.Fatalf("list = %v, %v", list, err)
	}
	// The same listener routes sandbox traffic by header: a killed
	// sandbox answers the proxy's 502.
	if ok, err := c.Kill(ctx, sb.SandboxID); !ok || err != nil {
		t.Fatalf("kill: %t %v", ok, err)
	}
	req, _ := http.NewRequest("GET", env["E2B_SANDBOX_URL"]+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(body), "The sandbox was not found") {
		t.Fatalf("health of killed sandbox: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest("GET", env["E2B_API_URL"]+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer adm")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `sandbox_killed_total{kill_reason="request"} 1`) {
		t.Fatalf("metrics: %d %.500s", resp.StatusCode, body)
	}
	if resp, err := http.Get(env["E2B_API_URL"] + "/metrics"); err != nil || resp.StatusCode != 401 {
		t.Fatalf("metrics without a token: %v %v", resp.StatusCode, err)
	}
	stop()

	// A restart without --api-key keeps accepting the seeded key.
	env, stop = serve(t, dir)
	defer stop()
	if _, _, err := client.New(env["E2B_API_URL"], key).List(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("seeded key after restart: %v", err)
	}
}

func TestServeGeneratesKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env, stop := serve(t, dir)
	first := env["E2B_API_KEY"]
	stop()
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(first) {
		t.Fatalf("generated key %q", first)
	}
	env, stop = serve(t, dir)
	defer stop()
	if env["E2B_API_KEY"] != first {
		t.Fatalf("key changed across restarts: %q then %q", first, env["E2B_API_KEY"])
	}
}

func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(&out, &errb)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, err := runCmd(t, "keys", "create", "--data-dir", dir, "--name", "ci")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`id: (\S+)\nkey: (e2b_[0-9a-f]{40})\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("create output %q", out)
	}
	out, err = runCmd(t, "keys", "list", "--data-dir", dir)
	if err != nil || !strings.Contains(out, m[1]) || strings.Contains(out, m[2]) || !strings.Contains(out, m[2][:8]+"…") {
		t.Fatalf("list output %q, %v (must show the mask, not the key)", out, err)
	}
	if _, err := runCmd(t, "keys", "revoke", "--data-dir", dir, m[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := runCmd(t, "keys", "revoke", "--data-dir", dir, m[1]); err == nil {
		t.Fatal("second revoke succeeded")
	}
	if out, _ := runCmd(t, "keys", "list", "--data-dir", dir); strings.Contains(out, m[1]) {
		t.Fatalf("revoked key listed: %q", out)
	}
	if _, err := runCmd(t, "serve", "--driver", "qemu", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "runsc, runc or fake") {
		t.Fatalf("bad driver: %v", err)
	}
}
