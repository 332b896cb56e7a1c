package app

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Metrics serves GET /metrics without a token on a listener of its own
// (for a Prometheus scraper on the host), from Start until Close.
type Metrics struct {
	sys  *System
	srv  *http.Server
	ln   net.Listener
	addr string
}

// NewMetrics listens on addr for the metrics of h (nil and no error when
// addr is empty). When bestEffort is set (the address is the default,
// not the operator's choice) an address in use is a warning, not an
// error.
func NewMetrics(sys *System, addr string, bestEffort bool, h http.Handler) (*Metrics, error) {
	if addr == "" {
		return nil, nil
	}
	log := sys.Logger.With("component", "metrics")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if bestEffort {
			log.Warn("metrics listener not started (set --metrics-listen)", "addr", addr, "error", err)
			return nil, nil
		}
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	log.Info("metrics listening", "addr", ln.Addr().String())
	return &Metrics{sys: sys, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln, addr: addr}, nil
}

// Start implements Component.
func (m *Metrics) Start(context.Context) error {
	go func() {
		if err := m.srv.Serve(m.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.sys.Logger.With("component", "metrics").Warn("metrics listener", "addr", m.addr, "error", err)
		}
	}()
	return nil
}

// Close implements Component.
func (m *Metrics) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
	_ = m.ln.Close() // when Start never ran
	return nil
}
