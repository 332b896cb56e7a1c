package egressproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"
)

// terminate serves a connection to a host with a header transform: the
// guest's TLS is terminated with a certificate for the name its SNI gave,
// signed by the sandbox's CA; each HTTP/1.1 request (its Host must be
// that name) gets the transform's headers, set with the values of the
// moment (an update applies to the next request), and goes over a TLS
// connection to the address the guest dialled, verified for the name
// with the host's roots. What the guest gets back is the destination's
// answer, or a 502/421 of the proxy's own that never carries a header
// value or an error's text.
func (g *guest) terminate(cc *conn, c net.Conn, d decision) {
	ca, err := g.p.ca(g.id)
	if err != nil {
		g.p.log.Warn("egress CA", "sandbox_id", g.id, "error", err)
		return
	}
	name := cc.name
	leaf, err := ca.leaf(name)
	if err != nil {
		g.p.log.Warn("egress leaf certificate", "sandbox_id", g.id, "host", name, "error", err)
		return
	}
	tc := tls.Server(c, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	hctx, cancel := context.WithTimeout(g.ctx, 15*time.Second)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		g.p.log.Debug("egress TLS handshake with the sandbox failed (does it trust its CA?)", "sandbox_id", g.id, "host", name, "error", err)
		return
	}
	hostport := name
	if p := cc.dst.Port(); p != 443 {
		hostport = net.JoinHostPort(name, strconv.Itoa(int(p)))
	}
	tr := &http.Transport{
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			raw, reason, err := g.dialUpstream(ctx, g.policy(), cc.dst, name, d.byName)
			if err != nil {
				return nil, &upstreamError{reason: reason, err: err}
			}
			uc := tls.Client(raw, &tls.Config{ServerName: name, RootCAs: g.p.cfg.RootCAs, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
			if err := uc.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, &upstreamError{reason: ReasonUpstreamTLS, err: err}
			}
			cc.mu.Lock()
			cc.up = uc
			cc.mu.Unlock()
			return uc, nil
		},
		ForceAttemptHTTP2:     false,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0,
	}
	defer tr.CloseIdleConnections()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = hostport
			pr.Out.Host = pr.In.Host
			if t, ok := g.policy().Egress.TransformFor(name); ok {
				for k, v := range t.Headers {
					pr.Out.Header.Set(k, v)
				}
			}
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var ue *upstreamError
			reason := ReasonUpstreamFailed
			if errors.As(err, &ue) {
				reason = ue.reason
			}
			cc.mu.Lock()
			cc.reason = reason
			cc.mu.Unlock()
			g.p.log.Debug("egress request failed", "sandbox_id", g.id, "host", name, "reason", reason, "error", err)
			msg := "the destination could not be reached"
			switch reason {
			case ReasonUpstreamTLS:
				msg = "the destination's TLS certificate did not verify"
			case ReasonProxyFailed:
				msg = "the sandbox's egress proxy could not be used"
			case ReasonBlocked:
				msg = "the destination's address is never reachable from a sandbox"
			}
			http.Error(w, "warren egress proxy: "+name+": "+msg, http.StatusBadGateway)
		},
	}
	var active sync.WaitGroup // requests being served (an upgraded one until its end)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active.Add(1)
		defer active.Done()
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !strings.EqualFold(host, name) {
			// The request names another host than the TLS name that was
			// checked against the address: it is not sent.
			http.Error(w, "warren egress proxy: the request's Host is not the TLS server name", http.StatusMisdirectedRequest)
			return
		}
		rp.ServeHTTP(w, r)
	})
	done := make(chan struct{})
	var once sync.Once
	srv := &http.Server{
		Handler:           handler,
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				once.Do(func() { close(done) })
			}
		},
	}
	l := &oneConn{c: &countingConn{Conn: tc, cc: cc}}
	go srv.Serve(l) // it ends when l is closed
	select {
	case <-done:
	case <-g.ctx.Done():
	}
	l.Close()
	active.Wait()
}

// upstreamError is a failed upstream connection with its reason.
type upstreamError struct {
	reason string
	err    error
}

func (e *upstreamError) Error() string { return e.reason + ": " + e.err.Error() }
func (e *upstreamError) Unwrap() error { return e.err }

// oneConn is a listener that yields one connection, then blocks until
// closed.
type oneConn struct {
	mu     sync.Mutex
	c      net.Conn
	closed chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	if l.closed == nil {
		l.closed = make(chan struct{})
	}
	closed := l.closed
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-closed
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed == nil {
		l.closed = make(chan struct{})
	}
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{} }

// countingConn counts a terminated connection's bytes (the sandbox's
// side, decrypted).
type countingConn struct {
	net.Conn
	cc *conn
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.cc.out.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.cc.in.Add(int64(n))
	return n, err
}
