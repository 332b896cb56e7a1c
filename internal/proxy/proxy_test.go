package proxy_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/route"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

type fakeRouter map[string]*route.Route

func (f fakeRouter) Route(_ context.Context, id string, admit func(*route.Admission) error) (*route.Route, error) {
	if id == "pausedsbx" {
		return nil, fmt.Errorf("sandbox %q: %w: %w", id, route.ErrPaused, errdefs.ErrConflict)
	}
	if id == "atlimit" { // an auto-resume over the team's concurrency limit
		return nil, fmt.Errorf("resume sandbox %q: %w", id, &lifecycle.LimitError{Limit: 5})
	}
	if id == "nodefull" { // an auto-resume no node has room for
		return nil, fmt.Errorf("resume sandbox %q on node %q: /var/lib/wstr-secret full: %w", id, "node-7", errdefs.ErrExhausted)
	}
	r, ok := f[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err := admit(&route.Admission{SandboxID: id, EnvdAccessToken: r.EnvdAccessToken, TrafficAccessToken: r.TrafficAccessToken}); err != nil {
		return nil, err
	}
	return r, nil
}

// backend stands in for a sandbox: envd's /health, a stream that waits for
// the client between chunks, and a WebSocket echo.
func backend(t *testing.T) (*httptest.Server, chan struct{}) {
	t.Helper()
	return backendAt(t, "127.0.0.1:0")
}

// backendAt is backend listening on addr.
func backendAt(t *testing.T, addr string) (*httptest.Server, chan struct{}) {
	t.Helper()
	next := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/init", func(w http.ResponseWriter, r *http.Request) { t.Error("internal route reached the sandbox") })
	mux.HandleFunc("GET /echo-host", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Host) })
	mux.HandleFunc("GET /echo-headers", func(w http.ResponseWriter, r *http.Request) { r.Header.Write(w) })
	mux.HandleFunc("POST /stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/connect+json")
		for i := range 3 {
			fmt.Fprintf(w, "chunk%d\n", i)
			w.(http.Flusher).Flush()
			if i < 2 {
				select {
				case <-next:
				case <-r.Context().Done():
					return
				}
			}
		}
	})
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "not a websocket", 400)
			return
		}
		h := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(h[:]))
		rw.Flush()
		line, _ := rw.ReadString('\n') // raw bytes are enough to prove pass-through
		rw.WriteString("echo:" + line)
		rw.Flush()
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, next
}

func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func setup(t *testing.T) (*httptest.Server, int, chan struct{}) {
	t.Helper()
	be, next := backend(t)
	bport := be.Listener.Addr().(*net.TCPAddr).Port
	p, err := proxy.New(proxy.Config{Router: fakeRouter{
		"sbx1":    {SandboxID: "sbx1", Address: be.Listener.Addr().String(), Host: "127.0.0.1"},
		"secured": {SandboxID: "secured", Address: be.Listener.Addr().String(), Host: "127.0.0.1", TrafficAccessToken: "tok"},
	}, Domain: "e2b.test:8443"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv, bport, next
}

func TestRouting(t *testing.T) {
	t.Parallel()
	srv, bport, _ := setup(t)
	closed := closedPort(t)
	envd := strconv.Itoa(proxy.EnvdPort)
	tests := []struct {
		name       string
		method     string
		path, host string
		hdr        map[string]string
		want       int
		body       string // exact when set
		contains   string
	}{
		{"headers on IP literal", "GET", "/health", "", map[string]string{"E2b-Sandbox-Id": "sbx1", "E2b-Sandbox-Port": envd}, 204, "", ""},
		{"headers on localhost", "GET", "/health", "localhost:3000", map[string]string{"E2b-Sandbox-Id": "sbx1", "E2b-Sandbox-Port": envd}, 204, "", ""},
		{"headers on sandbox.domain", "GET", "/health", "sandbox.e2b.test:8443", map[string]string{"E2b-Sandbox-Id": "sbx1", "E2b-Sandbox-Port": envd}, 204, "", ""},
		{"host route envd", "GET", "/health", envd + "-sbx1.e2b.test:8443", nil, 204, "", ""},
		{"host route other port keeps Host", "GET", "/echo-host", strconv.Itoa(bport) + "-sbx1.e2b.test", nil, 200, strconv.Itoa(bport) + "-sbx1.e2b.test", ""},
		{"missing sandbox by header", "GET", "/health", "", map[string]string{"E2b-Sandbox-Id": "gone", "E2b-Sandbox-Port": envd}, 502,
			`{"sandboxId":"gone","message":"The sandbox was not found","code":502}`, ""},
		{"missing sandbox by host", "GET", "/health", envd + "-gone.e2b.test", nil, 502,
			`{"sandboxId":"gone","message":"The sandbox was not found","code":502}`, ""},
		{"missing sandbox browser", "GET", "/", envd + "-gone.e2b.test", map[string]string{"Accept": "text/html,*/*"}, 502, "", "<html>"},
		{"port closed", "GET", "/", strconv.Itoa(closed) + "-sbx1.e2b.test", nil, 502,
			`{"sandboxId":"sbx1","message":"The sandbox is running but port is not open","port":"` + strconv.Itoa(closed) + `","code":502}`, ""},
		{"paused", "GET", "/health", envd + "-pausedsbx.e2b.test", nil, 502, `{"sandboxId":"pausedsbx","message":"The sandbox is paused","code":502,"canAutoResume":false}`, ""},
		{"auto-resume over the team's limit", "GET", "/health", envd + "-atlimit.e2b.test", nil, 429,
			`{"sandboxId":"atlimit","message":"you have reached the maximum number of concurrent sandboxes (5); kill a sandbox or ask for a higher limit","code":429}`, ""},
		// The client is told the class of an error made with no message
		// for it, not its text (a node, a host path).
		{"auto-resume no node has room for", "GET", "/health", envd + "-nodefull.e2b.test", nil, 429,
			`{"sandboxId":"nodefull","message":"resource exhausted: try again later","code":429}`, ""},
		{"missing port header as its own message", "GET", "/health", "", map[string]string{"E2b-Sandbox-Id": "sbx1"}, 400,
			`{"sandboxId":"sbx1","message":"header E2b-Sandbox-Port is missing","code":400}`, ""},
		{"internal route refused", "POST", "/init", envd + "-sbx1.e2b.test", nil, 404, "", `"path":"/init"`},
		{"missing port header", "GET", "/health", "", map[string]string{"E2b-Sandbox-Id": "sbx1"}, 400, "", "E2b-Sandbox-Port"},
		{"not sandbox traffic", "GET", "/health", "api.e2b.test", nil, 400, "", "not sandbox traffic"},
		{"traffic token missing", "GET", "/echo-host", strconv.Itoa(bport) + "-secured.e2b.test", nil, 403, "", "Token header 'e2b-traffic-access-token' is missing"},
		{"traffic token invalid", "GET", "/echo-host", strconv.Itoa(bport) + "-secured.e2b.test", map[string]string{"e2b-traffic-access-token": "bad"}, 403, "", "is invalid"},
		{"traffic token ok", "GET", "/echo-host", strconv.Itoa(bport) + "-secured.e2b.test", map[string]string{"e2b-traffic-access-token": "tok"}, 200, "", "secured"},
		{"envd port needs no traffic token", "GET", "/health", envd + "-secured.e2b.test", nil, 204, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if tc.host != "" {
				req.Host = tc.host
			}
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.want, b)
			}
			if tc.body != "" && string(b) != tc.body {
				t.Fatalf("body\n got %s\nwant %s", b, tc.body)
			}
			if !strings.Contains(string(b), tc.contains) {
				t.Fatalf("body %s lacks %q", b, tc.contains)
			}
		})
	}
}

// readStream checks that each chunk arrives before the backend is allowed
// to write the next: the proxy must flush, not buffer.
func readStream(t *testing.T, c *http.Client, url, host string, next chan struct{}) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/stream", strings.NewReader("{}"))
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		done := make(chan string, 1)
		go func() { l, _ := br.ReadString('\n'); done <- l }()
		select {
		case l := <-done:
			if l != fmt.Sprintf("chunk%d\n", i) {
				t.Fatalf("chunk %d = %q", i, l)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("chunk %d not flushed through the proxy", i)
		}
		if i < 2 {
			next <- struct{}{}
		}
	}
	return resp
}

func TestStreamingFlush(t *testing.T) {
	t.Parallel()
	srv, _, next := setup(t)
	readStream(t, srv.Client(), srv.URL, strconv.Itoa(proxy.EnvdPort)+"-sbx1.e2b.test", next)
}

func TestHTTP2OverTLS(t *testing.T) {
	t.Parallel()
	be, next := backend(t)
	p, _ := proxy.New(proxy.Config{Router: fakeRouter{"sbx1": {SandboxID: "sbx1", Address: be.Listener.Addr().String(), Host: "127.0.0.1"}}, Domain: "e2b.test"})
	srv := httptest.NewUnstartedServer(p)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	resp := readStream(t, srv.Client(), srv.URL, strconv.Itoa(proxy.EnvdPort)+"-sbx1.e2b.test", next)
	if resp.ProtoMajor != 2 {
		t.Fatalf("protocol %s, want HTTP/2", resp.Proto)
	}
}

func TestWebSocket(t *testing.T) {
	t.Parallel()
	srv, bport, _ := setup(t)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %d-sbx1.e2b.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", bport)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-Websocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("upgrade: %d %v", resp.StatusCode, resp.Header)
	}
	io.WriteString(conn, "hello\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo:hello\n" {
		t.Fatalf("echo = %q, %v", line, err)
	}
}

// TestAutoResume sends traffic to a paused sandbox that allows
// auto-resume, through the real lifecycle manager.
func TestAutoResume(t *testing.T) {
	t.Parallel()
	be, _ := backend(t)
	n := fakenode.New()
	n.Address = be.Listener.Addr().String()
	lc, err := lifecycle.New(lifecycle.Config{Store: storetest.SQLite(t), Node: n})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := lc.Create(ctx, lifecycle.CreateParams{TeamID: "t", Timeout: time.Minute, AutoResume: true, AutoPauseMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := lc.Pause(ctx, "t", sb.ID, true); err != nil {
		t.Fatal(err)
	}
	p, _ := proxy.New(proxy.Config{Router: lc, Domain: "e2b.test"})
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("GET", srv.URL+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(proxy.EnvdPort))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("health through auto-resume: %d", resp.StatusCode)
	}
	got, _ := lc.Get(ctx, "t", sb.ID)
	if got.State != "running" {
		t.Fatalf("state after traffic: %s", got.State)
	}
	// After a kill, the same request is a 502.
	if err := lc.Kill(ctx, "t", sb.ID, "request"); err != nil {
		t.Fatal(err)
	}
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("health after kill: %d", resp.StatusCode)
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	p, _ := proxy.New(proxy.Config{Router: fakeRouter{}, Domain: "e2b.test"})
	tests := []struct {
		host string
		hdr  bool
		want bool
	}{
		{"127.0.0.1:3000", true, true},
		{"127.0.0.1:3000", false, false},
		{"localhost", true, true},
		{"[::1]:3000", true, true},
		{"api.e2b.test", true, false},
		{"49983-abc.e2b.test", false, true},
		{"x-abc.e2b.test", false, false},
		{"49983-abc.other.test", false, false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%t", tc.host, tc.hdr), func(t *testing.T) {
			r := httptest.NewRequest("GET", "/health", nil)
			r.Host = tc.host
			if tc.hdr {
				r.Header.Set("E2b-Sandbox-Id", "abc")
			}
			if got := p.Match(r); got != tc.want {
				t.Fatalf("Match = %t, want %t", got, tc.want)
			}
		})
	}
}
