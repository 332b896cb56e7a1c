package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ShutdownGrace is how long a closing HTTP component lets in-flight
// requests finish.
const ShutdownGrace = 15 * time.Second

// NewHTTPServer is the HTTP server of every role's listeners over h: idle
// keep-alive connections and request headers are bounded so a client
// cannot hold connections or memory without end. tlsCfg, when set, is
// served (ServeTLS).
func NewHTTPServer(h http.Handler, tlsCfg *tls.Config, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// HTTP is a Component serving HTTP servers on their listeners: the one
// listener of serve and api, the RPC and proxy listeners of a node. A
// server that fails ends the run ("<name> serve: …"); Close shuts them
// down gracefully within ShutdownGrace ("<name> shutting down").
type HTTP struct {
	sys    *System
	prefix string
	// CertFile and KeyFile, when set, are served with each server's
	// TLSConfig; without them a TLSConfig must carry its certificates.
	CertFile, KeyFile string
	// OnServe, when set, is called once every server serves.
	OnServe func()
	servers []*http.Server
	lns     []net.Listener
	started bool
}

// NewHTTP makes an HTTP component of sys; name, when set, starts its
// errors and its shutdown log ("node" → "node serve: …").
func NewHTTP(sys *System, name string) *HTTP {
	prefix := ""
	if name != "" {
		prefix = name + " "
	}
	return &HTTP{sys: sys, prefix: prefix}
}

// Serve adds srv on ln.
func (h *HTTP) Serve(srv *http.Server, ln net.Listener) {
	h.servers = append(h.servers, srv)
	h.lns = append(h.lns, ln)
}

// Start implements Component.
func (h *HTTP) Start(context.Context) error {
	h.started = true
	for i, srv := range h.servers {
		go func() {
			var err error
			if srv.TLSConfig != nil || h.CertFile != "" {
				err = srv.ServeTLS(h.lns[i], h.CertFile, h.KeyFile)
			} else {
				err = srv.Serve(h.lns[i])
			}
			if !errors.Is(err, http.ErrServerClosed) {
				h.sys.Fail(fmt.Errorf("%sserve: %w", h.prefix, err))
			}
		}()
	}
	if h.OnServe != nil {
		h.OnServe()
	}
	return nil
}

// Close implements Component.
func (h *HTTP) Close() error {
	if !h.started {
		return nil
	}
	h.sys.Logger.Info(h.prefix + "shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	for _, srv := range h.servers {
		if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%sshutdown: %w", h.prefix, err)
		}
	}
	return nil
}

// BaseURL is the URL clients on this host reach the listener at addr at
// (an unspecified address reads as 127.0.0.1).
func BaseURL(addr *net.TCPAddr, withTLS bool) string {
	scheme := "http"
	if withTLS {
		scheme = "https"
	}
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, fmt.Sprint(addr.Port)))
}
