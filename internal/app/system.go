// Package app is the process model of Warren's three roles, each a small
// package of its own: `warren api` (apirole: the REST API, the edge proxy
// and the lifecycle over registered nodes), `warren node` (noderole: one
// machine's node agent behind the node RPC) and `warren serve` (serve: the
// API role over an in-process node). This package links neither role: a
// role links only what it runs (apirole's depaware.txt holds it to that).
//
// A process is one System (after tailscale's tsd.System): the typed
// subsystems every role has (logger, output, metrics registry, egress
// policy) and the components it runs. Components follow one lifecycle,
// caddy's model of an app: a constructor (New…) validates and acquires;
// Start begins the component's background work and returns; Close stops
// that work, waits for it and releases what the constructor acquired.
//
//	New… ──▶ System.Add ──▶ Start(ctx) ──▶ running ──▶ Close()
//	                   └──────────────────────────────▶ Close()   (the run never started)
//
// System.Run starts the components in the order they were added, waits
// until ctx ends or one of them fails, then closes every one in reverse
// order: the teardown of each role is said here, once.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/warren-sandbox/warren/internal/egress"
)

// Component is a part of a process that runs in the background: a
// server, a loop, a listener. Its constructor is its own (New…);
// System.Add takes it over.
type Component interface {
	// Start begins the component's work and returns once it is under
	// way. ctx carries the run's values and is never cancelled: the work
	// goes on until Close. An error ends the run before it serves.
	Start(ctx context.Context) error
	// Close stops the work Start began, waits for it, and releases what
	// the constructor acquired. It is called once, whether Start ran or
	// not.
	Close() error
}

// Options are what every role takes besides its own configuration.
type Options struct {
	// Logger receives the process's logs (default: text on stderr).
	Logger *slog.Logger
	// Out receives what the process prints for the operator, the export
	// lines of serve and api first (default os.Stdout).
	Out io.Writer
	// EgressAllow are the operator's exceptions to the egress policy
	// (internal/egress) that guards every outbound connection made for a
	// tenant (image pulls, webhook deliveries): CIDRs, IPs, IP:port or
	// host:port. Empty: only public addresses are reached.
	EgressAllow []string
}

// System is one process of Warren: its shared subsystems and its
// components.
type System struct {
	Logger *slog.Logger
	Out    io.Writer
	// Registry receives every component's metrics (with the Go and
	// process collectors).
	Registry *prometheus.Registry
	// Egress guards the outbound connections made for tenants.
	Egress *egress.Policy

	mu     sync.Mutex
	parts  []part
	closed bool
	fail   chan error // the first failure of a running component
}

type part struct {
	name string
	c    Component
}

// New makes the System of o.
func New(o Options) (*System, error) {
	eg, err := egress.Parse(o.EgressAllow)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &System{Logger: o.Logger, Out: o.Out, Registry: reg, Egress: eg, fail: make(chan error, 1)}, nil
}

// Add hands c to the System: Start runs it after the components added
// before it, Close closes it before them.
func (s *System) Add(name string, c Component) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parts = append(s.parts, part{name: name, c: c})
}

// OnClose adds the release of something a constructor acquired (a lock,
// a store, an agent): fn runs at Close, in its place in the reverse
// order. Its errors are the resource's own to log.
func (s *System) OnClose(name string, fn func()) {
	s.Add(name, closer(fn))
}

// Go adds a loop: fn runs from Start until Close, which cancels its ctx
// and waits for it. A loop that ends by itself before Close ends the run,
// with its error wrapped in its name.
func (s *System) Go(name string, fn func(ctx context.Context) error) {
	s.Add(name, &loop{sys: s, name: name, fn: fn})
}

// OnStart adds fn, run once at Start in its place in the order (an
// announcement, a first heartbeat); its error ends the run.
func (s *System) OnStart(name string, fn func(ctx context.Context) error) {
	s.Add(name, onStart(fn))
}

// Fail ends the run with err; the first failure wins. It is for a
// component whose background work failed.
func (s *System) Fail(err error) {
	select {
	case s.fail <- err:
	default:
	}
}

// Start starts the components in the order they were added and stops at
// the first that fails (Close then closes them all).
func (s *System) Start(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	s.mu.Lock()
	parts := s.parts
	s.mu.Unlock()
	for _, p := range parts {
		if err := p.c.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close closes every component added, in reverse order, and returns
// their errors joined. It is idempotent.
func (s *System) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	parts := s.parts
	s.mu.Unlock()
	var errs []error
	for i := len(parts) - 1; i >= 0; i-- {
		errs = append(errs, parts[i].c.Close())
	}
	return errors.Join(errs...)
}

// Run starts the components, waits until ctx ends or one of them fails,
// and closes them all. It returns the failure, else the errors of Close.
func (s *System) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		s.Close()
		return err
	}
	var failed error
	select {
	case <-ctx.Done():
	case failed = <-s.fail:
	}
	if err := s.Close(); failed == nil {
		return err
	}
	return failed
}

// closer is a Component that only releases.
type closer func()

func (closer) Start(context.Context) error { return nil }
func (c closer) Close() error              { c(); return nil }

// onStart is a Component that only starts.
type onStart func(context.Context) error

func (o onStart) Start(ctx context.Context) error { return o(ctx) }
func (onStart) Close() error                      { return nil }

// loop is the Component of System.Go.
type loop struct {
	sys    *System
	name   string
	fn     func(context.Context) error
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *loop) Start(ctx context.Context) error {
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		err := l.fn(ctx)
		if ctx.Err() != nil {
			return // stopped by Close
		}
		if err == nil {
			err = errors.New("stopped")
		}
		l.sys.Fail(fmt.Errorf("%s: %w", l.name, err))
	}()
	return nil
}

func (l *loop) Close() error {
	if l.cancel == nil {
		return nil // never started
	}
	l.cancel()
	<-l.done
	return nil
}
