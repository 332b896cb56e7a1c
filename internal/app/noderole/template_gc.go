package noderole

import (
	"context"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/node"
)

// addTemplateGC adds the template garbage collector (builder.Collector)
// over the node's catalog and build engine to sys: it runs once at
// Start, then every cfg.TemplateGCInterval (builder.DefaultGCInterval
// when 0; negative disables it). Its counters go to sys's registry.
func addTemplateGC(sys *app.System, cfg Host, local *builder.Local, a *node.Agent) error {
	log := sys.Logger.With("component", "template-gc")
	gc, err := builder.NewCollector(builder.CollectorConfig{Builder: local.Builder, Service: local.Service, Node: a, Grace: cfg.TemplateGCGrace, Registry: sys.Registry, Logger: log})
	if err != nil {
		return err
	}
	if cfg.TemplateGCInterval < 0 {
		log.Info("template garbage collection disabled")
		return nil
	}
	sys.Go("template gc", func(ctx context.Context) error { gc.Loop(ctx, cfg.TemplateGCInterval); return nil })
	return nil
}
