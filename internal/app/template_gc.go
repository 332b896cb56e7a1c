package app

import (
	"context"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/node"
)

// startTemplateGC runs the template garbage collector (builder.Collector)
// over the node's catalog and build engine: once now, then every
// cfg.TemplateGCInterval (builder.DefaultGCInterval when 0; negative
// disables it). Its counters go to reg. The returned function stops it
// and waits for a collection in progress.
func startTemplateGC(cfg Config, local *builder.Local, a *node.Agent, reg prometheus.Registerer, log *slog.Logger) (stop func(), err error) {
	log = log.With("component", "template-gc")
	gc, err := builder.NewCollector(builder.CollectorConfig{Builder: local.Builder, Service: local.Service, Node: a, Grace: cfg.TemplateGCGrace, Registry: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	if cfg.TemplateGCInterval < 0 {
		log.Info("template garbage collection disabled")
		return func() {}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { gc.Loop(ctx, cfg.TemplateGCInterval) })
	return func() {
		cancel()
		wg.Wait()
	}, nil
}
