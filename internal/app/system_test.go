package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder notes the order of what the components do.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// testPart is a Component that records its start and close.
type testPart struct {
	r        *recorder
	name     string
	startErr error
}

func (p *testPart) Start(context.Context) error { p.r.add("start " + p.name); return p.startErr }
func (p *testPart) Close() error                { p.r.add("close " + p.name); return nil }

func quiet(t *testing.T) *System {
	t.Helper()
	sys, err := New(Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return sys
}

// TestRunOrder: components start in the order they were added and close
// in reverse, each once; a loop runs from Start until its Close, which
// comes after the components added after it have closed.
func TestRunOrder(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	sys := quiet(t)
	sys.OnClose("lock", func() { r.add("close lock") })
	sys.Add("a", &testPart{r: r, name: "a"})
	sys.Go("loop", func(ctx context.Context) error {
		r.add("loop runs")
		<-ctx.Done()
		r.add("loop ends")
		return nil
	})
	sys.Add("b", &testPart{r: r, name: "b"})
	ctx, cancel := context.WithCancel(context.Background())
	sys.OnStart("announce", func(context.Context) error {
		cancel() // the run ends once everything started
		return nil
	})
	if err := sys.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sys.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	got := r.list()
	// The loop's goroutine may note its start any time before its end.
	got = slices.DeleteFunc(got, func(e string) bool { return e == "loop runs" })
	want := []string{"start a", "start b", "close b", "loop ends", "close a", "close lock"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if !slices.Contains(r.list(), "loop runs") {
		t.Error("the loop never ran")
	}
}

// TestLoopThatStopsEndsTheRun: a loop that returns by itself ends the
// run with its error (or "stopped"), named, and everything closes.
func TestLoopThatStopsEndsTheRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{{errors.New("watch node: boom"), "lifecycle: watch node: boom"}, {nil, "lifecycle: stopped"}} {
		r := &recorder{}
		sys := quiet(t)
		sys.Add("a", &testPart{r: r, name: "a"})
		sys.Go("lifecycle", func(context.Context) error { return tc.err })
		errc := make(chan error, 1)
		go func() { errc <- sys.Run(context.Background()) }()
		select {
		case err := <-errc:
			if err == nil || err.Error() != tc.want {
				t.Errorf("run: %v, want %q", err, tc.want)
			}
		case <-time.After(time.Minute):
			t.Fatal("the run did not end")
		}
		if got := r.list(); !slices.Equal(got, []string{"start a", "close a"}) {
			t.Errorf("events %q", got)
		}
	}
}

// TestStartFailureClosesAll: a component that fails to start ends the
// run with its error before it serves; those started and those not yet
// started all close.
func TestStartFailureClosesAll(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	sys := quiet(t)
	sys.Add("a", &testPart{r: r, name: "a"})
	sys.Add("b", &testPart{r: r, name: "b", startErr: errors.New("node capacity: no memory")})
	sys.Add("c", &testPart{r: r, name: "c"})
	err := sys.Run(context.Background())
	if err == nil || err.Error() != "node capacity: no memory" {
		t.Fatalf("run: %v", err)
	}
	want := []string{"start a", "start b", "close c", "close b", "close a"}
	if got := r.list(); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestHTTPDrainsBeforeLoopsStop: at the end of a run the HTTP component
// (added last) shuts down first, letting an in-flight request finish
// while the loops it needs still run; a listener that fails ends the run
// as "<name> serve: …".
func TestHTTPDrainsBeforeLoopsStop(t *testing.T) {
	t.Parallel()
	sys := quiet(t)
	loopDone := make(chan struct{})
	sys.Go("lifecycle", func(ctx context.Context) error {
		defer close(loopDone)
		<-ctx.Done()
		return nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inFlight, release := make(chan struct{}), make(chan struct{})
	srv := NewHTTP(sys, "")
	srv.Serve(NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inFlight)
		<-release
		select {
		case <-loopDone:
			http.Error(w, "the loop stopped before the request ended", http.StatusInternalServerError)
		default:
			w.Write([]byte("ok"))
		}
	}), nil, sys.Logger), ln)
	served := make(chan struct{})
	srv.OnServe = func() { close(served) }
	sys.Add("http", srv)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- sys.Run(ctx) }()
	<-served
	respc := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			respc <- err.Error()
			return
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 64)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		respc <- b.String()
	}()
	<-inFlight
	cancel()
	// The shutdown has begun once the listener refuses new connections.
	for deadline := time.Now().Add(time.Minute); ; {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts after the run's end")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if got := <-respc; got != "ok" {
		t.Errorf("in-flight request: %q", got)
	}
	if err := <-errc; err != nil {
		t.Fatalf("run: %v", err)
	}

	// A server whose listener fails ends the run, named.
	sys2 := quiet(t)
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln2.Close()
	srv2 := NewHTTP(sys2, "node")
	srv2.Serve(NewHTTPServer(http.NotFoundHandler(), nil, sys2.Logger), ln2)
	sys2.Add("node serve", srv2)
	if err := sys2.Run(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "node serve: ") {
		t.Errorf("run over a closed listener: %v", err)
	}
}

// TestNewRefusesABadEgressAllow: the egress exceptions are parsed once,
// by New.
func TestNewRefusesABadEgressAllow(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{EgressAllow: []string{"not an address"}}); err == nil {
		t.Fatal("New took a bad --egress-allow")
	}
}
