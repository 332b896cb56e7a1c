package proxy_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// resetting accepts connections and resets the first n of them before
// answering, as a server in a sandbox that was just restored can.
type resetting struct {
	net.Listener
	left atomic.Int32
}

func (l *resetting) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.left.Add(-1) < 0 {
			return c, err
		}
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}

// TestWakeHoldsRequest: the request that wakes a paused sandbox is held
// while the port resets connections, and answered once it serves.
func TestWakeHoldsRequest(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &resetting{Listener: l}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served") }))
	srv.Listener = rl
	srv.Start()
	t.Cleanup(srv.Close)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)

	n := fakenode.New()
	n.Host = "127.0.0.1"
	lc, err := lifecycle.New(lifecycle.Config{Store: storetest.SQLite(t), Node: n})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := lc.Create(ctx, lifecycle.CreateParams{TeamID: "t", Timeout: time.Minute, AutoResume: true, AutoPauseMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := proxy.New(proxy.Config{Router: lc, Domain: "e2b.test"})
	ps := httptest.NewServer(p)
	t.Cleanup(ps.Close)
	get := func() (int, string) {
		req, _ := http.NewRequest("GET", ps.URL+"/", nil)
		req.Header.Set("E2b-Sandbox-Id", sb.ID)
		req.Header.Set("E2b-Sandbox-Port", port)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// A running sandbox's port that resets is a 502 at once.
	rl.left.Store(1)
	if code, body := get(); code != http.StatusBadGateway {
		t.Fatalf("reset on a running sandbox: %d %s", code, body)
	}
	if err := lc.Pause(ctx, "t", sb.ID, true); err != nil {
		t.Fatal(err)
	}
	rl.left.Store(3)
	if code, body := get(); code != 200 || body != "served" {
		t.Fatalf("waking request: %d %s", code, body)
	}
	if rl.left.Load() >= 0 {
		t.Fatalf("the port reset %d connections fewer than planned", rl.left.Load()+1)
	}
}
