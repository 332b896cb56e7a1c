package serve

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/app/apirole"
	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// TestMetricsListen runs serve with the fake driver and scrapes the
// metrics listener without a token; an operator's address that is taken
// fails the start, the default's is only a warning.
func TestMetricsListen(t *testing.T) {
	// A loopback port free a moment ago: the test needs an address it can
	// name twice.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	run := func(ctx context.Context, metrics string, bestEffort bool) (<-chan error, <-chan string) {
		errc, ready := make(chan error, 1), make(chan string, 1)
		cfg := Config{Host: noderole.Host{DataDir: t.TempDir(), Driver: "fake"},
			Settings: apirole.Settings{Listen: "127.0.0.1:0", MetricsListen: metrics, MetricsListenBestEffort: bestEffort, Ready: func(a string) { ready <- a }}}
		go func() { errc <- Run(ctx, app.Options{Logger: testenv.Logger(t), Out: io.Discard}, cfg) }()
		return errc, ready
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc, ready := run(ctx, addr, false)
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("serve: %v", err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "go_goroutines") {
		t.Fatalf("scrape: %d %.200s", resp.StatusCode, b)
	}
	// The address is taken now: asked for explicitly, the start fails;
	// as the default, it is a warning.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	errc2, _ := run(ctx2, addr, false)
	if err := <-errc2; err == nil || !strings.Contains(err.Error(), "metrics listen") {
		t.Fatalf("second serve on a taken metrics address: %v", err)
	}
	errc3, ready3 := run(ctx2, addr, true)
	select {
	case <-ready3:
	case err := <-errc3:
		t.Fatalf("best-effort serve: %v", err)
	}
	cancel2()
	<-errc3
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("metrics listener still open after serve ended")
	}
}
