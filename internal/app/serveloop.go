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

// newHTTPServer is the HTTP server of serve and api over h: idle
// keep-alive connections and request headers are bounded so a client
// cannot hold connections or memory without end; withTLS offers HTTP/2.
func newHTTPServer(h http.Handler, withTLS bool, log *slog.Logger) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	if withTLS {
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	}
	return srv
}

// baseURL is the URL clients on this host reach the listener at addr at
// (an unspecified address reads as 127.0.0.1).
func baseURL(addr *net.TCPAddr, withTLS bool) string {
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

// serveUntil serves srv on ln (over TLS when cert is set) and calls ready
// once it does, until ctx ends, the server fails or the lifecycle's run
// ends (its result is put back on lcDone for the deferred waits); then it
// shuts srv down gracefully, within 15 s. serve and api end this way.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener, cert, key string, ready func(), lcDone chan error, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() {
		if cert != "" {
			errc <- srv.ServeTLS(ln, cert, key)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	ready()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case err := <-lcDone:
		lcDone <- err
		if err != nil {
			return fmt.Errorf("lifecycle: %w", err)
		}
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
