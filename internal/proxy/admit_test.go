package proxy_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// TestCredentialsBeforeWake sends requests without the right token to a
// paused sandbox that allows auto-resume: each is refused and the sandbox
// stays paused. Only a request with the token wakes it.
func TestCredentialsBeforeWake(t *testing.T) {
	t.Parallel()
	be, _ := backend(t)
	bport := strconv.Itoa(be.Listener.Addr().(*net.TCPAddr).Port)
	n := fakenode.New()
	n.Address = be.Listener.Addr().String()
	lc, err := lifecycle.New(lifecycle.Config{Store: storetest.SQLite(t), Node: n})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := lc.Create(ctx, lifecycle.CreateParams{TeamID: "t", Timeout: time.Minute, AutoResume: true, AutoPauseMemory: true, Secure: true, TrafficToken: true})
	if err != nil {
		t.Fatal(err)
	}
	envdTok, trafficTok := sb.Spec.EnvdAccessToken, sb.Spec.TrafficAccessToken
	if err := lc.Pause(ctx, "t", sb.ID, true); err != nil {
		t.Fatal(err)
	}
	p, _ := proxy.New(proxy.Config{Router: lc, Domain: "e2b.test"})
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	envd := strconv.Itoa(proxy.EnvdPort)
	do := func(method, path, port string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.Header.Set("E2b-Sandbox-Id", sb.ID)
		req.Header.Set("E2b-Sandbox-Port", port)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	expired := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	refused := []struct {
		name, method, path, port string
		hdr                      map[string]string
		want                     int
		body                     string
	}{
		{"user port without traffic token", "GET", "/echo-host", bport, nil, 403, "is missing"},
		{"user port with a wrong traffic token", "GET", "/echo-host", bport, map[string]string{"E2b-Traffic-Access-Token": trafficTok + "x"}, 403, "is invalid"},
		{"user port with the envd token", "GET", "/echo-host", bport, map[string]string{"E2b-Traffic-Access-Token": envdTok}, 403, "is invalid"},
		{"envd health without token", "GET", "/health", envd, nil, 502,
			`{"sandboxId":"` + sb.ID + `","message":"The sandbox is paused","code":502,"canAutoResume":true}`},
		{"envd rpc without token", "POST", "/process.Process/List", envd, nil, 401, auth.MsgMissingToken},
		{"envd rpc with a wrong token", "POST", "/process.Process/List", envd, map[string]string{"X-Access-Token": trafficTok}, 401, auth.MsgMissingToken},
		{"files with a signature of another token", "GET", "/files?path=%2Fa&signature=" + url.QueryEscape(auth.Sign("/a", auth.OpRead, "", "other", 0)), envd, nil, 401, auth.MsgMissingToken},
		{"files with an expired signature", "GET", "/files?path=%2Fa&signature_expiration=" + expired + "&signature=" + url.QueryEscape(auth.Sign("/a", auth.OpRead, "", envdTok, mustInt(expired))), envd, nil, 401, auth.MsgMissingToken},
		{"files with a repeated signed path", "GET", "/files?path=%2Fa&path=%2Fetc%2Fshadow&signature=" + url.QueryEscape(auth.Sign("/a", auth.OpRead, "", envdTok, 0)), envd, nil, 401, auth.MsgMissingToken},
		{"files with a read signature, to write", "POST", "/files?path=%2Fa&signature=" + url.QueryEscape(auth.Sign("/a", auth.OpRead, "", envdTok, 0)), envd, nil, 401, auth.MsgMissingToken},
		{"files with another user", "GET", "/files?path=%2Fa&username=root&signature=" + url.QueryEscape(auth.Sign("/a", auth.OpRead, "", envdTok, 0)), envd, nil, 401, auth.MsgMissingToken},
	}
	for _, tc := range refused {
		code, body := do(tc.method, tc.path, tc.port, tc.hdr)
		if code != tc.want || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, code, body, tc.want, tc.body)
		}
		if got, _ := lc.Get(ctx, "t", sb.ID); got.State != sandbox.StatePaused {
			t.Fatalf("%s woke the sandbox: %s", tc.name, got.State)
		}
	}
	if code, body := do("GET", "/echo-host", bport, map[string]string{"E2b-Traffic-Access-Token": trafficTok}); code != 200 {
		t.Fatalf("with the traffic token: %d %s", code, body)
	}
	if got, _ := lc.Get(ctx, "t", sb.ID); got.State != sandbox.StateRunning {
		t.Fatalf("the right token did not wake the sandbox: %s", got.State)
	}
	// A signed /files URL wakes it too.
	if err := lc.Pause(ctx, "t", sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if code, body := do("GET", "/health?path=%2Fa&signature="+url.QueryEscape(auth.Sign("/a", auth.OpRead, "", envdTok, 0)), envd, nil); code != 502 {
		t.Fatalf("a signature on /health woke the sandbox: %d %s", code, body)
	}
	if code, body := do("GET", "/health", envd, map[string]string{"X-Access-Token": envdTok}); code != 204 {
		t.Fatalf("health with the envd token: %d %s", code, body)
	}
	// A signed URL without routing headers (plain-http mode) finds the
	// paused sandbox by its token and wakes it.
	if err := lc.Pause(ctx, "t", sb.ID, true); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(srv.URL + "/files?path=%2Fa&signature=" + url.QueryEscape(auth.Sign("/a", auth.OpRead, "", envdTok, 0)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, _ := lc.Get(ctx, "t", sb.ID); resp.StatusCode == 401 || got.State != sandbox.StateRunning {
		t.Fatalf("signed URL on a paused sandbox: %d, state %s", resp.StatusCode, got.State)
	}
}

func mustInt(s string) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return v
}

// TestMaskHostAndHTTPSPorts: network.maskRequestHost replaces the Host
// the sandbox's port sees, and network.httpsPorts are spoken to over TLS.
func TestMaskHostAndHTTPSPorts(t *testing.T) {
	t.Parallel()
	be := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Host+" "+strconv.FormatBool(r.TLS != nil))
	}))
	t.Cleanup(be.Close)
	port := be.Listener.Addr().(*net.TCPAddr).Port
	p, _ := proxy.New(proxy.Config{Router: fakeRouter{
		"tls":   {SandboxID: "tls", Host: "127.0.0.1", HTTPSPorts: []int{port}, MaskRequestHost: "localhost:${PORT}"},
		"plain": {SandboxID: "plain", Host: "127.0.0.1"},
	}, Domain: "e2b.test"})
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	for _, tc := range []struct{ id, want string }{
		{"tls", "localhost:" + strconv.Itoa(port) + " true"},
		{"plain", ""}, // plain http to a TLS port: the sandbox's server refuses it
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Host = strconv.Itoa(port) + "-" + tc.id + ".e2b.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if tc.want != "" && (resp.StatusCode != 200 || string(b) != tc.want) {
			t.Errorf("%s: %d %s, want %s", tc.id, resp.StatusCode, b, tc.want)
		}
		if tc.want == "" && resp.StatusCode == 200 {
			t.Errorf("%s: plain http to a TLS port answered %s", tc.id, b)
		}
	}
}

// TestCORSPreflight: a browser's preflight of envd traffic is answered by
// the proxy without waking a paused sandbox (it carries no token), and
// the proxy's own errors are readable cross-origin.
func TestCORSPreflight(t *testing.T) {
	t.Parallel()
	n := fakenode.New()
	lc, err := lifecycle.New(lifecycle.Config{Store: storetest.SQLite(t), Node: n})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := lc.Create(ctx, lifecycle.CreateParams{TeamID: "t", Timeout: time.Minute, AutoResume: true, AutoPauseMemory: true, Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.Pause(ctx, "t", sb.ID, true); err != nil {
		t.Fatal(err)
	}
	p, _ := proxy.New(proxy.Config{Router: lc, Domain: "e2b.test"})
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("OPTIONS", srv.URL+"/filesystem.Filesystem/ListDir", nil)
	req.Host = strconv.Itoa(proxy.EnvdPort) + "-" + sb.ID + ".e2b.test"
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "x-access-token, content-type")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "*" || resp.Header.Get("Access-Control-Allow-Headers") != "x-access-token, content-type" {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	if got, _ := lc.Get(ctx, "t", sb.ID); got.State != sandbox.StatePaused {
		t.Fatalf("a preflight woke the sandbox: %s", got.State)
	}
	req, _ = http.NewRequest("GET", srv.URL+"/health", nil)
	req.Host = strconv.Itoa(proxy.EnvdPort) + "-gone.e2b.test"
	req.Header.Set("Origin", "https://app.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("502 not readable cross-origin: %d %v", resp.StatusCode, resp.Header)
	}
}
