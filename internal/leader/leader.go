// Package leader elects, among the `warren api` replicas sharing one
// database, the one that runs the singletons (node liveness, the
// reconcile after a node comes back). The election is a lease row in the
// store (store.SQL.AcquireLease): the holder renews it every Renew, and
// when it stops (crash, partition, shutdown) another replica takes it
// once it expires, TTL after its last renewal. A graceful stop releases
// the lease so the next leader starts at once.
//
// A replica counts itself leader from a renewal until TTL-Renew after it
// began, so it steps down (its singletons' context ends) before the row
// can expire and another replica take over, provided the replicas'
// clocks agree within Renew.
package leader

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Defaults of Config.
const (
	DefaultName  = "singletons"
	DefaultTTL   = 10 * time.Second
	DefaultRenew = 2 * time.Second
)

// Leases is the store's lease row (store.SQL implements it).
type Leases interface {
	AcquireLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (held bool, requests int64, err error)
	ReleaseLease(ctx context.Context, name, holder string) error
	PokeLease(ctx context.Context, name string) error
}

// Config configures an Elector. Leases is required.
type Config struct {
	Leases Leases
	// Name is the lease's row (default DefaultName).
	Name string
	// Holder names this replica in the row (default host name, process ID
	// and a random suffix).
	Holder string
	// TTL is how long a renewal holds the lease; Renew how often the
	// holder renews it and the others try to take it. Renew must be under
	// half of TTL.
	TTL, Renew time.Duration
	Logger     *slog.Logger
	// Registry receives api_leader (1 on the leader); nil registers nothing.
	Registry prometheus.Registerer
}

// Elector takes part in one election. Create it with New and run it with
// Run.
type Elector struct {
	cfg   Config
	log   *slog.Logger
	gauge prometheus.Gauge

	mu      sync.Mutex
	until   time.Time     // leader until then; zero when not
	changed chan struct{} // closed and replaced when leadership changes

	requests int64         // the lease's request count at the last renewal
	pokes    chan struct{} // signalled when it grew, and at each new term
}

// New returns an Elector.
func New(cfg Config) (*Elector, error) {
	if cfg.Leases == nil {
		return nil, fmt.Errorf("leader: leases are required: %w", errdefs.ErrInvalid)
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), sandbox.RandomToken(4))
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Renew <= 0 {
		cfg.Renew = DefaultRenew
	}
	if 2*cfg.Renew >= cfg.TTL {
		return nil, fmt.Errorf("leader: renew interval %s must be under half the lease ttl %s: %w", cfg.Renew, cfg.TTL, errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Elector{cfg: cfg, log: cfg.Logger.With("lease", cfg.Name, "holder", cfg.Holder), changed: make(chan struct{}), pokes: make(chan struct{}, 1),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "api_leader", Help: "1 while this replica holds the singletons' lease."})}
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(e.gauge); err != nil {
			return nil, fmt.Errorf("leader metrics: %w", err)
		}
	}
	return e, nil
}

// Holder is this replica's name in the lease row.
func (e *Elector) Holder() string { return e.cfg.Holder }

// IsLeader reports whether this replica leads now.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return time.Now().Before(e.until)
}

// state returns whether this replica leads and a channel closed at the
// next change.
func (e *Elector) state() (bool, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return time.Now().Before(e.until), e.changed
}

func (e *Elector) set(until time.Time) {
	e.mu.Lock()
	was := !e.until.IsZero()
	e.until = until
	now := !until.IsZero()
	if was != now {
		close(e.changed)
		e.changed = make(chan struct{})
	}
	e.mu.Unlock()
	if was == now {
		return
	}
	if now {
		e.gauge.Set(1)
		e.log.Info("leader: this replica runs the singletons")
	} else {
		e.gauge.Set(0)
		e.log.Info("leader: this replica no longer runs the singletons")
	}
}

// Run takes part in the election until ctx ends, then releases the lease
// if it holds it.
func (e *Elector) Run(ctx context.Context) {
	tick := time.NewTicker(e.cfg.Renew)
	defer tick.Stop()
	stepDown := time.NewTimer(time.Hour)
	defer stepDown.Stop()
	for {
		start := time.Now()
		ok, requests, err := e.cfg.Leases.AcquireLease(ctx, e.cfg.Name, e.cfg.Holder, start, e.cfg.TTL)
		switch {
		case err != nil && ctx.Err() == nil:
			// Keep what we had until it runs out: the row may still be ours.
			e.log.Warn("leader: lease renewal failed", "error", err)
		case err != nil:
		case ok:
			until := start.Add(e.cfg.TTL - e.cfg.Renew)
			if !e.IsLeader() || requests != e.requests {
				e.poked()
			}
			e.requests = requests
			e.set(until)
			stepDown.Reset(time.Until(until))
		default:
			e.set(time.Time{})
		}
		select {
		case <-ctx.Done():
			held := e.IsLeader()
			e.set(time.Time{})
			if held {
				if err := e.cfg.Leases.ReleaseLease(context.WithoutCancel(ctx), e.cfg.Name, e.cfg.Holder); err != nil {
					e.log.Warn("leader: lease release failed", "error", err)
				}
			}
			return
		case <-tick.C:
		case <-stepDown.C:
			if !e.IsLeader() {
				e.set(time.Time{})
			}
		}
	}
}

// Poke asks the leader, whichever replica it is, to signal Pokes at its
// next renewal (within Renew). Pokes made while no replica leads are lost;
// the next leader signals Pokes as its term starts.
func (e *Elector) Poke(ctx context.Context) error {
	return e.cfg.Leases.PokeLease(ctx, e.cfg.Name)
}

// Pokes is signalled on the leader when a term starts and after a renewal
// that saw new Poke calls; several pokes may make one signal.
func (e *Elector) Pokes() <-chan struct{} { return e.pokes }

func (e *Elector) poked() {
	select {
	case e.pokes <- struct{}{}:
	default:
	}
}

// While runs fn each time this replica becomes leader, with a context that
// ends when it stops leading or ctx ends, and returns once ctx has ended
// and fn has returned. fn is meant to run until its context ends; if it
// returns sooner, it runs again at the next term.
func (e *Elector) While(ctx context.Context, fn func(ctx context.Context)) {
	for {
		leading, changed := e.state()
		if !leading {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				continue
			}
		}
		fnCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); fn(fnCtx) }()
	term:
		for {
			select {
			case <-ctx.Done():
				break term
			case <-done:
				select {
				case <-ctx.Done():
				case <-changed:
				}
				break term
			case <-changed:
				if leading, changed = e.state(); !leading {
					break term
				}
			}
		}
		cancel()
		<-done
		if ctx.Err() != nil {
			return
		}
	}
}
