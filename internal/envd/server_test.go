package envd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"

	fspb "github.com/warren-sandbox/warren/api/envd/filesystem"
	"github.com/warren-sandbox/warren/api/envd/filesystem/filesystemconnect"
	pb "github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/internal/envd/metrics"
	"github.com/warren-sandbox/warren/internal/testenv"
)

func newTestServer(t *testing.T, initToken string) *httptest.Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.PortForward = false
	cfg.Init = false
	cfg.TemplateEnv = map[string]string{"PATH": "/usr/bin:/bin", "TPL": "t"}
	if initToken != "" {
		sum := sha256.Sum256([]byte(initToken))
		cfg.InitTokenSHA256 = hex.EncodeToString(sum[:])
	}
	s, err := New(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url string, body string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestHealthMetricsEnvs(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, "")
	status, body, h := do(t, "GET", srv.URL+"/health", "", nil)
	if status != 204 || body != "" || h.Get("X-Warren-Mem-Used") == "" {
		t.Fatalf("health: %d %q %v", status, body, h)
	}
	status, body, _ = do(t, "GET", srv.URL+"/metrics", "", nil)
	var m metrics.Metrics
	if status != 200 || json.Unmarshal([]byte(body), &m) != nil || m.MemTotal == 0 || m.MemUsed == 0 || m.MemUsed > m.MemTotal || m.CPUCount == 0 || m.DiskTotal == 0 || m.Ts == 0 {
		t.Fatalf("metrics: %d %s", status, body)
	}
	for _, k := range []string{`"cpu_used_pct"`, `"mem_total_mib"`, `"mem_used_mib"`, `"mem_cache"`, `"disk_used"`} {
		if !strings.Contains(body, k) {
			t.Fatalf("metrics lack %s: %s", k, body)
		}
	}
	do(t, "POST", srv.URL+"/init", `{"envVars":{"A":"1"}}`, nil)
	status, body, _ = do(t, "GET", srv.URL+"/envs", "", nil)
	if status != 200 || strings.TrimSpace(body) != `{"A":"1"}` {
		t.Fatalf("envs: %d %s", status, body)
	}
}

func TestInitWithNodeToken(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, "node-secret")
	cases := []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"no token", nil, 401},
		{"wrong token", map[string]string{"X-Warren-Init-Token": "nope"}, 401},
		{"access token is not enough", map[string]string{"X-Access-Token": "tok"}, 401},
		{"node token", map[string]string{"X-Warren-Init-Token": "node-secret"}, 204},
		{"again (idempotent)", map[string]string{"X-Warren-Init-Token": "node-secret"}, 204},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := do(t, "POST", srv.URL+"/init", `{"accessToken":"tok","envVars":{"X":"1"}}`, tc.hdr)
			if status != tc.status {
				t.Fatalf("got %d %s", status, body)
			}
		})
	}
	// The token is now required everywhere but /health.
	if status, _, _ := do(t, "GET", srv.URL+"/health", "", nil); status != 204 {
		t.Fatalf("health: %d", status)
	}
	if status, _, _ := do(t, "GET", srv.URL+"/envs", "", nil); status != 401 {
		t.Fatalf("envs without token: %d", status)
	}
	if status, _, _ := do(t, "GET", srv.URL+"/envs", "", map[string]string{"X-Access-Token": "tok"}); status != 200 {
		t.Fatalf("envs with token: %d", status)
	}
	// A restore hands over a new token.
	if status, _, _ := do(t, "POST", srv.URL+"/init", `{"accessToken":"tok2"}`, map[string]string{"X-Warren-Init-Token": "node-secret"}); status != 204 {
		t.Fatalf("re-init: %d", status)
	}
	if status, _, _ := do(t, "GET", srv.URL+"/envs", "", map[string]string{"X-Access-Token": "tok"}); status != 401 {
		t.Fatalf("old token still valid: %d", status)
	}
}

func TestInitUpstreamRule(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, "")
	if status, _, _ := do(t, "POST", srv.URL+"/init", `{"accessToken":"tok"}`, nil); status != 204 {
		t.Fatalf("first init: %d", status)
	}
	if status, _, _ := do(t, "POST", srv.URL+"/init", `{"accessToken":"evil"}`, nil); status != 401 {
		t.Fatalf("init without the token: %d", status)
	}
	if status, _, _ := do(t, "POST", srv.URL+"/init", `{"accessToken":"tok2"}`, map[string]string{"X-Access-Token": "tok"}); status != 204 {
		t.Fatalf("init with the token: %d", status)
	}
	if status, _, _ := do(t, "POST", srv.URL+"/init", `not json`, map[string]string{"X-Access-Token": "tok2"}); status != 400 {
		t.Fatalf("bad body: %d", status)
	}
}

// TestRPCThroughServer checks the composed server: token enforcement on
// RPCs, the Connect JSON error body, the env layering and the default user.
func TestRPCThroughServer(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, "")
	user := "root"
	if os.Geteuid() != 0 {
		user = os.Getenv("USER")
	}
	body, _ := json.Marshal(map[string]any{"accessToken": "tok", "defaultUser": user, "envVars": map[string]string{"INIT": "i"}})
	if status, _, _ := do(t, "POST", srv.URL+"/init", string(body), nil); status != 204 {
		t.Fatalf("init: %d", status)
	}
	status, raw, h := do(t, "POST", srv.URL+"/filesystem.Filesystem/Stat", `{"path":"/nope"}`, map[string]string{"Content-Type": "application/json", "X-Access-Token": "tok"})
	if status != 404 || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || !strings.Contains(raw, `"code":"not_found"`) {
		t.Fatalf("stat: %d %s", status, raw)
	}
	if status, _, _ := do(t, "POST", srv.URL+"/filesystem.Filesystem/Stat", `{"path":"/"}`, map[string]string{"Content-Type": "application/json"}); status != 401 {
		t.Fatalf("stat without token: %d", status)
	}
	withToken := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
			r.Header().Set("X-Access-Token", "tok")
			return next(ctx, r)
		}
	}))
	fs := filesystemconnect.NewFilesystemClient(http.DefaultClient, srv.URL, connect.WithProtoJSON(), withToken)
	if _, err := fs.Stat(context.Background(), connect.NewRequest(&fspb.StatRequest{Path: "/"})); err != nil {
		t.Fatal(err)
	}
	pc := processconnect.NewProcessClient(http.DefaultClient, srv.URL)
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo $TPL$INIT$USER"}}})
	req.Header().Set("X-Access-Token", "tok")
	s, err := pc.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for s.Receive() {
		out.Write(s.Msg().GetEvent().GetData().GetStdout())
	}
	if err := s.Err(); err != nil || out.String() != "ti"+user+"\n" {
		t.Fatalf("output %q, %v", out.String(), err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"port 0", func(c *Config) { c.Port = 0 }, false},
		{"port too big", func(c *Config) { c.Port = 70000 }, false},
		{"negative retain", func(c *Config) { c.ProcessRetain = -1 }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			if err := c.Validate(); (err == nil) != tc.ok {
				t.Fatalf("validate: %v", err)
			}
		})
	}
	if _, err := New(Config{Port: 1, InitTokenSHA256: "zz"}, testenv.Logger(t)); err == nil {
		t.Fatal("bad init token hash accepted")
	}
}

func TestInitInstallsCABundle(t *testing.T) {
	t.Parallel()
	store := t.TempDir() + "/ca-certificates.crt"
	if err := os.WriteFile(store, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.PortForward, cfg.Init, cfg.TrustStore = false, false, store
	s, err := New(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	const cert = "-----BEGIN CERTIFICATE-----\nQkJCQg==\n-----END CERTIFICATE-----\n"
	body, _ := json.Marshal(map[string]string{"caBundle": cert})
	for i := 0; i < 2; i++ { // idempotent
		if status, raw, _ := do(t, "POST", srv.URL+"/init", string(body), nil); status != 204 {
			t.Fatalf("init: %d %s", status, raw)
		}
	}
	b, _ := os.ReadFile(store)
	if strings.Count(string(b), "BEGIN CERTIFICATE") != 2 || !strings.HasSuffix(string(b), cert) {
		t.Fatalf("store:\n%s", b)
	}
	if status, _, _ := do(t, "POST", srv.URL+"/init", `{"caBundle":"not pem"}`, nil); status != 400 {
		t.Fatalf("bad bundle: %d", status)
	}
}

// TestServeH2CAndGRPC serves on a real listener: HTTP/1.1 and HTTP/2 with
// prior knowledge both work, and so does the gRPC protocol.
func TestServeH2CAndGRPC(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.PortForward, cfg.Init = false, false
	s, err := New(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	base := "http://" + ln.Addr().String()
	h2 := &http.Transport{Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	defer h2.CloseIdleConnections()
	resp, err := (&http.Client{Transport: h2}).Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 204 || resp.ProtoMajor != 2 {
		t.Fatalf("h2c health: %d over %s", resp.StatusCode, resp.Proto)
	}
	pc := processconnect.NewProcessClient(&http.Client{Transport: h2}, base, connect.WithGRPC())
	if _, err := pc.List(context.Background(), connect.NewRequest(&pb.ListRequest{})); err != nil {
		t.Fatalf("grpc list: %v", err)
	}
}

// TestInitIDRenewedAtEveryInit: GET /envs carries envd's init ID, which
// every /init renews (the node calls /init after every start and
// restore, so copies of one memory image get different IDs), a repeated
// /init with the same body included; a refused /init renews nothing.
func TestInitIDRenewedAtEveryInit(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, "node-secret")
	id := func(token string) string {
		t.Helper()
		status, body, h := do(t, "GET", srv.URL+"/envs", "", map[string]string{"X-Access-Token": token})
		if status != 200 {
			t.Fatalf("envs: %d %s", status, body)
		}
		return h.Get("X-Warren-Init-Id")
	}
	seen := map[string]bool{}
	prev := id("")
	if len(prev) < 32 {
		t.Fatalf("init ID before any /init: %q, want a random ID", prev)
	}
	seen[prev] = true
	for i, body := range []string{`{"accessToken":"a"}`, `{"accessToken":"a"}`, `{"accessToken":"b"}`, `{}`} {
		if status, b, _ := do(t, "POST", srv.URL+"/init", body, map[string]string{"X-Warren-Init-Token": "node-secret"}); status != 204 {
			t.Fatalf("init %d: %d %s", i, status, b)
		}
		tok := "a"
		if i >= 2 {
			tok = "b"
		}
		got := id(tok)
		if seen[got] {
			t.Fatalf("init %d (%s): init ID %q seen before", i, body, got)
		}
		seen[got] = true
		prev = got
	}
	if status, _, _ := do(t, "POST", srv.URL+"/init", `{"accessToken":"b"}`, map[string]string{"X-Warren-Init-Token": "wrong"}); status != 401 {
		t.Fatalf("init with a wrong node token: %d", status)
	}
	if got := id("b"); got != prev {
		t.Fatalf("a refused /init changed the init ID: %q -> %q", prev, got)
	}
}
