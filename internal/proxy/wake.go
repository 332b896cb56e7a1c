package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// wakeTransport carries a request that woke its sandbox. Right after a
// resume the sandbox's network and the servers in it can take a moment to
// answer, so the request is held, not failed: a dial that is refused,
// reset or unreachable is retried until the target's wakeBy, and so is a
// whole round trip of a bodiless idempotent request whose connection was
// reset before any answer. After wakeBy the error stands (a 502). It keeps
// no connections: later requests use the ordinary pool.
type wakeTransport struct{ tr *http.Transport }

func (p *Proxy) newWakeTransport() *wakeTransport {
	d := &net.Dialer{Timeout: p.cfg.DialTimeout, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		t, _ := ctx.Value(routeKey{}).(*target)
		for wait := time.Duration(0); ; {
			c, err := d.DialContext(ctx, network, addr)
			if wait, err = again(ctx, t, wait, err); err != nil || c != nil {
				return c, err
			}
		}
	}
	return &wakeTransport{tr: &http.Transport{
		DialContext:           dial,
		DialTLSContext:        p.dialTLS(dial),
		DisableKeepAlives:     true,
		ExpectContinueTimeout: time.Second,
	}}
}

// RoundTrip implements http.RoundTripper.
func (w *wakeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t, _ := req.Context().Value(routeKey{}).(*target)
	for wait := time.Duration(0); ; {
		resp, err := w.tr.RoundTrip(req)
		if err == nil || !replayable(req) {
			return resp, err
		}
		if wait, err = again(req.Context(), t, wait, err); err != nil {
			return nil, err
		}
	}
}

// again waits before the next attempt after err and returns the next
// wait, or returns err (nil on success) when there is to be none.
func again(ctx context.Context, t *target, wait time.Duration, err error) (time.Duration, error) {
	if err == nil {
		return 0, nil
	}
	wait = min(max(2*wait, 20*time.Millisecond), 500*time.Millisecond)
	if t == nil || !retryable(err) || time.Now().Add(wait).After(t.wakeBy) {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(wait):
		return wait, nil
	}
}

// replayable reports whether req can be sent again: idempotent, no body.
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return req.Body == nil || req.Body == http.NoBody
	}
	return false
}

// retryable reports whether err means "not answering yet".
func retryable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
