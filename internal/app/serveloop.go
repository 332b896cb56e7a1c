package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

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
