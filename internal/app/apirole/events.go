package apirole

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/events"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/webhooks"
)

// EventsConfig tunes lifecycle event retention and webhook delivery.
type EventsConfig struct {
	// Retention is how long lifecycle events (and their deliveries) are
	// kept (default 30 days).
	Retention time.Duration
	// WebhookMaxAttempts, WebhookBackoff and WebhookMaxBackoff bound the
	// retries of a delivery (defaults 10, 5 s doubling up to 10 min).
	WebhookMaxAttempts int
	WebhookBackoff     time.Duration
	WebhookMaxBackoff  time.Duration
	// WebhookTeamConcurrency bounds one team's delivery attempts in
	// flight, its share of the dispatcher (default 2 of 8).
	WebhookTeamConcurrency int
}

// pokingStore wakes the webhook dispatcher after every write that may add
// outbox rows, so deliveries leave at once rather than at the next poll.
type pokingStore struct {
	store.Store
	poke func()
}

func (p pokingStore) AppendEvent(ctx context.Context, e *store.Event) error {
	err := p.Store.AppendEvent(ctx, e)
	if err == nil {
		p.poke()
	}
	return err
}

func (p pokingStore) RecordSandbox(ctx context.Context, sb *store.Sandbox, ev *store.Event, limit int, states ...sandbox.State) error {
	err := p.Store.RecordSandbox(ctx, sb, ev, limit, states...)
	if err == nil && ev != nil {
		p.poke()
	}
	return err
}

func (p pokingStore) TransitionSandbox(ctx context.Context, id string, fn func(*store.Sandbox) (*store.Event, error)) (*store.Sandbox, error) {
	sb, err := p.Store.TransitionSandbox(ctx, id, fn)
	if err == nil {
		p.poke()
	}
	return sb, err
}

// newDispatcher makes the webhook dispatcher of cfg over st.
// Deliveries connect through the egress policy.
func newDispatcher(cfg EventsConfig, eg *egress.Policy, st store.Store, log *slog.Logger, reg prometheus.Registerer) (*webhooks.Dispatcher, error) {
	return webhooks.New(webhooks.Config{Registry: reg,
		Store: st, Logger: log.With("component", "webhooks"), MaxAttempts: cfg.WebhookMaxAttempts,
		Backoff: cfg.WebhookBackoff, MaxBackoff: cfg.WebhookMaxBackoff, Egress: eg,
		TeamConcurrency: cfg.WebhookTeamConcurrency,
	})
}

// addEvents mounts the events and webhooks API on api and adds the
// webhook dispatcher and the event pruner to sys.
func addEvents(sys *app.System, cfg EventsConfig, st store.Store, disp *webhooks.Dispatcher, api *apiserver.Server) {
	api.MountEvents(apiserver.EventsConfig{Poke: disp.Poke, ValidateURL: webhooks.URLValidator(sys.Egress)})
	pr := events.NewPruner(events.PrunerConfig{Store: st, Retention: cfg.Retention, Logger: sys.Logger.With("component", "events")})
	sys.Go("webhooks", func(ctx context.Context) error { disp.Run(ctx); return nil })
	sys.Go("event pruner", func(ctx context.Context) error { pr.Run(ctx); return nil })
}
