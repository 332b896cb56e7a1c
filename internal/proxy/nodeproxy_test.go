package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

const nodeToken = "node-secret-1"

// hop is a NodeHop that presents cred, over plain HTTP.
func hop(cred string) func(context.Context, string) (proxy.NodeHop, error) {
	return func(context.Context, string) (proxy.NodeHop, error) { return proxy.NodeHop{Credential: cred}, nil }
}

// nodeRig is an edge proxy whose sandboxes are on another node: sbx1's
// ports listen on 127.0.0.2 (its "sandbox address"), sbx2 is another
// sandbox of the node on 127.0.0.3, and a server on 127.0.0.1 stands for
// anything else the node can reach. Only the node proxy knows the
// sandboxes' addresses.
type nodeRig struct {
	edge, node  *httptest.Server
	bport       int // sbx1's backend port
	next        chan struct{}
	other, evil *atomic.Int64 // requests that reached sbx2 and the bystander
	evilAddr    string
	otherPort   string // sbx2's port
}

func counter(t *testing.T, addr string) (*atomic.Int64, string) {
	t.Helper()
	var n atomic.Int64
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.WriteString(w, "reached")
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &n, ln.Addr().String()
}

func newNodeRig(t *testing.T) *nodeRig {
	t.Helper()
	be, next := backendAt(t, "127.0.0.2:0")
	r := &nodeRig{bport: be.Listener.Addr().(*net.TCPAddr).Port, next: next}
	var otherAddr string
	r.other, otherAddr = counter(t, "127.0.0.3:0")
	_, r.otherPort, _ = net.SplitHostPort(otherAddr)
	r.evil, r.evilAddr = counter(t, "127.0.0.1:0")

	fn := fakenode.New()
	fn.Put(&nodeapi.Sandbox{ID: "sbx1", State: sandbox.StateRunning, Host: "127.0.0.2", Address: be.Listener.Addr().String()})
	fn.Put(&nodeapi.Sandbox{ID: "sbx2", State: sandbox.StateRunning, Host: "127.0.0.3", Address: otherAddr})
	fn.Put(&nodeapi.Sandbox{ID: "sbxpaused", State: sandbox.StatePaused})
	np, err := proxy.NewNode(proxy.NodeConfig{Node: fn, Token: nodeToken})
	if err != nil {
		t.Fatal(err)
	}
	r.node = httptest.NewServer(np)
	t.Cleanup(r.node.Close)

	// The edge's routes name the node proxy; their own addresses are
	// closed ports of this host, which the edge must not dial.
	closed := net.JoinHostPort("127.0.0.1", strconv.Itoa(closedPort(t)))
	via := r.node.Listener.Addr().String()
	edge, err := proxy.New(proxy.Config{Router: fakeRouter{
		"sbx1":  {SandboxID: "sbx1", Address: closed, Host: "127.0.0.1", NodeProxy: via},
		"sbx9":  {SandboxID: "sbx9", Address: closed, Host: "127.0.0.1", NodeProxy: via}, // not on that node
		"sbxws": {SandboxID: "sbx1", Address: closed, Host: "127.0.0.1", NodeProxy: via},
	}, Domain: "e2b.test", NodeHop: hop(nodeToken)})
	if err != nil {
		t.Fatal(err)
	}
	r.edge = httptest.NewServer(edge)
	t.Cleanup(r.edge.Close)
	return r
}

func get(t *testing.T, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
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

// TestNodeHop: the edge proxy reaches a sandbox on another node through
// that node's proxy: envd's port, another port (its Host kept), streams
// and WebSockets; the sandbox sees none of the hop's headers.
func TestNodeHop(t *testing.T) {
	t.Parallel()
	r := newNodeRig(t)
	envd := strconv.Itoa(proxy.EnvdPort)
	if code, body := get(t, r.edge.URL+"/health", map[string]string{"Host": envd + "-sbx1.e2b.test"}); code != http.StatusNoContent {
		t.Errorf("envd through the node: %d %s", code, body)
	}
	host := fmt.Sprintf("%d-sbx1.e2b.test", r.bport)
	if code, body := get(t, r.edge.URL+"/echo-host", map[string]string{"Host": host}); code != 200 || body != host {
		t.Errorf("a port through the node: %d %q, want 200 %q", code, body, host)
	}
	code, body := get(t, r.edge.URL+"/echo-headers", map[string]string{"Host": host, "Warren-Node-Token": "from-the-client"})
	if code != 200 || strings.Contains(strings.ToLower(body), "warren-node") || strings.Contains(body, nodeToken) {
		t.Errorf("headers the sandbox sees: %d\n%s", code, body)
	}
	if !strings.Contains(body, "X-Forwarded-For: 127.0.0.1") {
		t.Errorf("the sandbox does not see the client's address in X-Forwarded-For:\n%s", body)
	}
	readStream(t, http.DefaultClient, r.edge.URL, envd+"-sbx1.e2b.test", r.next)

	conn, err := net.Dial("tcp", r.edge.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %d-sbx1.e2b.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", r.bport)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade through the node: %d", resp.StatusCode)
	}
	io.WriteString(conn, "hello\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo:hello\n" {
		t.Fatalf("echo through the node = %q, %v", line, err)
	}
}

// TestNodeProxyToken: the node proxy answers 401 without the node token,
// or with another one, and reaches nothing.
func TestNodeProxyToken(t *testing.T) {
	t.Parallel()
	r := newNodeRig(t)
	base := map[string]string{proxy.HeaderNodeSandboxID: "sbx2", proxy.HeaderNodeSandboxPort: r.otherPort}
	for _, tok := range []string{"", "wrong", nodeToken + "x", nodeToken[:len(nodeToken)-1]} {
		h := map[string]string{proxy.HeaderNodeToken: tok}
		for k, v := range base {
			h[k] = v
		}
		if code, body := get(t, r.node.URL+"/", h); code != http.StatusUnauthorized || !strings.Contains(body, `"code":401`) {
			t.Errorf("token %q: %d %s, want 401", tok, code, body)
		}
	}
	if n := r.other.Load(); n != 0 {
		t.Errorf("sbx2 reached %d times without the token", n)
	}
	base[proxy.HeaderNodeToken] = nodeToken
	if code, body := get(t, r.node.URL+"/", base); code != 200 || body != "reached" {
		t.Errorf("with the token: %d %q", code, body)
	}
	// An edge with another token is refused too.
	edge, _ := proxy.New(proxy.Config{Router: fakeRouter{"sbx1": {SandboxID: "sbx1", Host: "127.0.0.1", NodeProxy: r.node.Listener.Addr().String()}}, Domain: "e2b.test", NodeHop: hop("other")})
	es := httptest.NewServer(edge)
	t.Cleanup(es.Close)
	if code, _ := get(t, es.URL+"/health", map[string]string{"Host": strconv.Itoa(proxy.EnvdPort) + "-sbx1.e2b.test"}); code != http.StatusUnauthorized {
		t.Errorf("edge with a wrong node token: %d, want 401", code)
	}
}

// TestNodeProxyAttacks: with the node token, a request still reaches only
// the port of the sandbox it names: not a host it names, not an unknown
// or paused sandbox, and a client of the edge cannot name another
// sandbox of the node.
func TestNodeProxyAttacks(t *testing.T) {
	t.Parallel()
	r := newNodeRig(t)
	_, evilPort, _ := net.SplitHostPort(r.evilAddr)
	hdr := func(id, port string, extra ...string) map[string]string {
		h := map[string]string{proxy.HeaderNodeToken: nodeToken, proxy.HeaderNodeSandboxID: id, proxy.HeaderNodeSandboxPort: port}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		return h
	}
	var e struct {
		SandboxID string `json:"sandboxId"`
		Message   string `json:"message"`
		Code      int    `json:"code"`
	}
	code, body := get(t, r.node.URL+"/", hdr("nosuchsbx", "80"))
	if err := json.Unmarshal([]byte(body), &e); code != http.StatusBadGateway || err != nil || e.SandboxID != "nosuchsbx" || e.Code != 502 || e.Message == "" {
		t.Errorf("unknown sandbox: %d %s, want 502 with E2B's body", code, body)
	}
	cases := []struct {
		name string
		h    map[string]string
		want int
	}{
		{"a paused sandbox", hdr("sbxpaused", "80"), http.StatusBadGateway},
		{"an address as the ID", hdr(r.evilAddr, "80"), http.StatusBadRequest},
		{"a path as the ID", hdr("../sbx1", "80"), http.StatusBadRequest},
		{"no ID", hdr("", "80"), http.StatusBadRequest},
		{"a host:port as the port", hdr("sbx1", r.evilAddr), http.StatusBadRequest},
		{"port 0", hdr("sbx1", "0"), http.StatusBadRequest},
		// The bystander's port, on the sandbox's address: closed there.
		{"another port of the host", hdr("sbx1", evilPort), http.StatusBadGateway},
		{"a Host naming the bystander", hdr("sbx1", evilPort, "Host", r.evilAddr), http.StatusBadGateway},
		{"envd's internal route", hdr("sbx1", strconv.Itoa(proxy.EnvdPort)), http.StatusNotFound},
	}
	for _, c := range cases {
		path := "/"
		if c.name == "envd's internal route" {
			path = "/init"
		}
		if code, body := get(t, r.node.URL+path, c.h); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
	// An absolute-form request naming the bystander goes to the sandbox.
	conn, err := net.Dial("tcp", r.node.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET http://%s/echo-host HTTP/1.1\r\nHost: %s\r\n%s: %s\r\n%s: sbx1\r\n%s: %d\r\nConnection: close\r\n\r\n",
		r.evilAddr, r.evilAddr, proxy.HeaderNodeToken, nodeToken, proxy.HeaderNodeSandboxID, proxy.HeaderNodeSandboxPort, r.bport)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != r.evilAddr {
		t.Errorf("absolute-form request: %d %q, want the sandbox's echo of the Host", resp.StatusCode, b)
	}

	// Through the edge: the client's own hop headers are replaced, so it
	// cannot turn sbx1's route into one to sbx2.
	envd := strconv.Itoa(proxy.EnvdPort)
	if code, _ := get(t, r.edge.URL+"/health", map[string]string{"Host": envd + "-sbx1.e2b.test", proxy.HeaderNodeSandboxID: "sbx2", proxy.HeaderNodeSandboxPort: r.otherPort}); code != http.StatusNoContent {
		t.Errorf("edge request with hop headers of its own: %d, want sbx1's envd", code)
	}
	// A route to a node that does not hold the sandbox: 502.
	if code, body := get(t, r.edge.URL+"/health", map[string]string{"Host": envd + "-sbx9.e2b.test"}); code != http.StatusBadGateway || !strings.Contains(body, `"sandboxId":"sbx9"`) {
		t.Errorf("sandbox the node does not hold: %d %s", code, body)
	}
	if n, m := r.evil.Load(), r.other.Load(); n != 0 || m != 0 {
		t.Errorf("the bystander was reached %d times, sbx2 %d times", n, m)
	}
}

// TestNodeHopWake: a request that woke a sandbox on another node is held
// by that node's proxy while the sandbox's port resets connections, as
// the edge proxy holds one for a sandbox of its own host.
func TestNodeHopWake(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.4:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &resetting{Listener: l}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served") }))
	srv.Listener = rl
	srv.Start()
	t.Cleanup(srv.Close)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)

	fn := fakenode.New()
	fn.Put(&nodeapi.Sandbox{ID: "sbxwake", State: sandbox.StateRunning, Host: "127.0.0.4", Address: l.Addr().String()})
	np, err := proxy.NewNode(proxy.NodeConfig{Node: fn, Token: nodeToken})
	if err != nil {
		t.Fatal(err)
	}
	ns := httptest.NewServer(np)
	t.Cleanup(ns.Close)
	via := ns.Listener.Addr().String()
	// Two edges: one routes the sandbox as running, one as just woken.
	edge := func(woken bool) string {
		p, err := proxy.New(proxy.Config{Router: fakeRouter{"sbxwake": {SandboxID: "sbxwake", Host: "127.0.0.1", NodeProxy: via, Woken: woken}},
			Domain: "e2b.test", NodeHop: hop(nodeToken)})
		if err != nil {
			t.Fatal(err)
		}
		es := httptest.NewServer(p)
		t.Cleanup(es.Close)
		return es.URL
	}
	running, woken := edge(false), edge(true)
	host := map[string]string{"Host": port + "-sbxwake.e2b.test"}
	rl.left.Store(1)
	if code, body := get(t, running+"/", host); code != http.StatusBadGateway {
		t.Fatalf("reset on a running sandbox: %d %s", code, body)
	}
	rl.left.Store(3)
	if code, body := get(t, woken+"/", host); code != 200 || body != "served" {
		t.Fatalf("waking request through the node: %d %s", code, body)
	}
	if rl.left.Load() >= 0 {
		t.Fatalf("the port reset %d connections fewer than planned", rl.left.Load()+1)
	}
}

// TestNodeHopTLSAndMask: through a node, a sandbox's httpsPorts are still
// spoken to over TLS (by the node) and its maskRequestHost still replaces
// the Host the port sees.
func TestNodeHopTLSAndMask(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%t %s", r.TLS != nil, r.Host)
	}))
	be.Listener.Close()
	be.Listener = ln
	be.StartTLS()
	t.Cleanup(be.Close)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	fn := fakenode.New()
	fn.Put(&nodeapi.Sandbox{ID: "sbxtls", State: sandbox.StateRunning, Host: "127.0.0.5", Address: "127.0.0.5:1"})
	np, err := proxy.NewNode(proxy.NodeConfig{Node: fn, Token: nodeToken})
	if err != nil {
		t.Fatal(err)
	}
	ns := httptest.NewServer(np)
	t.Cleanup(ns.Close)
	p, err := proxy.New(proxy.Config{Router: fakeRouter{"sbxtls": {SandboxID: "sbxtls", Host: "127.0.0.1", NodeProxy: ns.Listener.Addr().String(),
		HTTPSPorts: []int{mustAtoi(t, port)}, MaskRequestHost: "app.internal:${PORT}"}}, Domain: "e2b.test", NodeHop: hop(nodeToken)})
	if err != nil {
		t.Fatal(err)
	}
	es := httptest.NewServer(p)
	t.Cleanup(es.Close)
	if code, body := get(t, es.URL+"/", map[string]string{"Host": port + "-sbxtls.e2b.test"}); code != 200 || body != "true app.internal:"+port {
		t.Errorf("https port through the node: %d %q, want TLS and the masked host", code, body)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
