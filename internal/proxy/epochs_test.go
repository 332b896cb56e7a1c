package proxy_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/route"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// epochRouter routes one sandbox, whose epoch the test changes.
type epochRouter struct {
	mu sync.Mutex
	r  route.Route
}

func (e *epochRouter) Route(context.Context, string, func(*route.Admission) error) (*route.Route, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.r
	return &r, nil
}

func (e *epochRouter) setEpoch(n int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.r.Epoch = n
}

// A sandbox resumed at the same address (it kept its network slot) has
// its guest's network stack restored from the checkpoint, which resets
// the connections pooled before the pause. The proxy must not send the
// next request on one: it opens a new connection once the sandbox's epoch
// changed, and reuses its pooled one while the epoch stays.
func TestNewEpochDropsPooledConnections(t *testing.T) {
	t.Parallel()
	be, conns := connCounter(t)
	rt := &epochRouter{r: route.Route{SandboxID: "sbx1", Address: be.Listener.Addr().String(), Host: "127.0.0.1", Epoch: 1}}
	p, err := proxy.New(proxy.Config{Router: rt, Domain: "e2b.test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	send := func() {
		t.Helper()
		postNoContent(t, srv, func(req *http.Request) { req.Host = strconv.Itoa(proxy.EnvdPort) + "-sbx1.e2b.test" })
	}
	send()
	send()
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections to the sandbox for two requests in one epoch, want 1 (pooled)", n)
	}
	rt.setEpoch(3) // paused and resumed
	send()
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections after the sandbox's epoch changed, want a new one (2)", n)
	}
	send()
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections for a second request in the new epoch, want the pooled one (2)", n)
	}
}

// The node proxy of `warren node` watches its own sandboxes' epochs as
// the edge proxy of `warren serve` does.
func TestNodeProxyNewEpochDropsPooledConnections(t *testing.T) {
	t.Parallel()
	be, conns := connCounter(t)
	fn := fakenode.New()
	put := func(epoch int64) {
		fn.Put(&nodeapi.Sandbox{ID: "sbx1", State: sandbox.StateRunning, Host: "127.0.0.1", Address: be.Listener.Addr().String(), Epoch: epoch})
	}
	put(1)
	np, err := proxy.NewNode(proxy.NodeConfig{Node: fn, Token: nodeToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(np)
	t.Cleanup(srv.Close)
	send := func() {
		t.Helper()
		postNoContent(t, srv, func(req *http.Request) {
			req.Header.Set(proxy.HeaderNodeToken, nodeToken)
			req.Header.Set(proxy.HeaderNodeSandboxID, "sbx1")
			req.Header.Set(proxy.HeaderNodeSandboxPort, strconv.Itoa(proxy.EnvdPort))
		})
	}
	send()
	send()
	put(3)
	send()
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections: want 1 for the first epoch's two requests and a new one after the change", n)
	}
}

// connCounter is a sandbox port answering 204 that counts the
// connections made to it.
func connCounter(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	be.Start()
	t.Cleanup(be.Close)
	return be, &conns
}

// postNoContent sends an envd-like POST through srv, set up by prepare,
// and expects connCounter's 204.
func postNoContent(t *testing.T, srv *httptest.Server, prepare func(*http.Request)) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/process.Process/Start", nil)
	prepare(req)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
