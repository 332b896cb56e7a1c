package events

import (
	"context"
	"log/slog"
	"time"

	"github.com/warren-sandbox/warren/internal/store"
)

// DefaultRetention is how long events are kept when PrunerConfig leaves
// Retention zero.
const DefaultRetention = 30 * 24 * time.Hour

// PrunerConfig configures a Pruner. Store is required.
type PrunerConfig struct {
	Store store.Store
	// Retention is how long an event is kept (default 30 days).
	Retention time.Duration
	// Interval is how often old events are deleted (default 1 h).
	Interval time.Duration
	Logger   *slog.Logger
}

// Pruner deletes events older than the retention period, with their
// webhook deliveries.
type Pruner struct {
	cfg PrunerConfig
}

// NewPruner returns a Pruner.
func NewPruner(cfg PrunerConfig) *Pruner {
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Pruner{cfg: cfg}
}

// PruneOnce deletes the events older than the retention period now, and
// the rows of sandboxes killed before it; it returns how many events went.
func (p *Pruner) PruneOnce(ctx context.Context) (int, error) {
	cut := time.Now().Add(-p.cfg.Retention)
	n, err := p.cfg.Store.PruneEvents(ctx, cut)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		p.cfg.Logger.Info("pruned lifecycle events past retention", "count", n, "retention", p.cfg.Retention)
	}
	ns, err := p.cfg.Store.PruneSandboxes(ctx, cut)
	if err != nil {
		return n, err
	}
	if ns > 0 {
		p.cfg.Logger.Info("pruned killed sandboxes past retention", "count", ns, "retention", p.cfg.Retention)
	}
	return n, nil
}

// Run prunes at start and then every Interval until ctx ends.
func (p *Pruner) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := p.PruneOnce(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.Warn("prune lifecycle events", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
