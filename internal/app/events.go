package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/events"
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
}

// startEvents mounts the events and webhooks API on api and runs the
// webhook dispatcher and the event pruner until ctx ends; wait waits for
// them.
func startEvents(ctx context.Context, cfg EventsConfig, st store.Store, api *apiserver.Server, log *slog.Logger) (wait func(), err error) {
	disp, err := webhooks.New(webhooks.Config{
		Store: st, Logger: log.With("component", "webhooks"), MaxAttempts: cfg.WebhookMaxAttempts,
		Backoff: cfg.WebhookBackoff, MaxBackoff: cfg.WebhookMaxBackoff,
	})
	if err != nil {
		return nil, err
	}
	api.MountEvents(apiserver.EventsConfig{Poke: disp.Poke})
	pr := events.NewPruner(events.PrunerConfig{Store: st, Retention: cfg.Retention, Logger: log.With("component", "events")})
	var wg sync.WaitGroup
	wg.Go(func() { disp.Run(ctx) })
	wg.Go(func() { pr.Run(ctx) })
	return wg.Wait, nil
}
