package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// DefaultMetricsListen is where `warren serve` offers Prometheus metrics
// without a token unless told otherwise: loopback only, so that only the
// host (and its scraper) reaches it.
const DefaultMetricsListen = "127.0.0.1:9464"

// serveMetrics serves metrics at GET /metrics on addr, without a token,
// until ctx ends. When bestEffort is set (the address is the default, not
// the operator's choice) an address in use is a warning, not an error.
// It returns a function that stops the listener.
func serveMetrics(ctx context.Context, addr string, bestEffort bool, metrics http.Handler, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if bestEffort {
			log.Warn("metrics listener not started (set --metrics-listen)", "addr", addr, "error", err)
			return func() {}, nil
		}
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics listener", "addr", addr, "error", err)
		}
	}()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
