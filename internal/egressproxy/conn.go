package egressproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/netslot"
)

// conn is one guest connection the proxy carries.
type conn struct {
	g     *guest
	c     *net.TCPConn // the guest's side
	dst   netip.AddrPort
	name  string
	mitm  bool // its TLS is terminated for a transform
	start time.Time

	mu     sync.Mutex
	up     net.Conn // the destination's side, once dialled
	closed bool
	reason string // the decision's reason, or why it failed or was cut

	out, in atomic.Int64
}

func (c *conn) entry(open bool) Entry {
	c.mu.Lock()
	reason := c.reason
	c.mu.Unlock()
	return Entry{Time: c.start.UTC(), Proto: "tcp", Host: c.name, Addr: c.dst.Addr().String(), Port: int(c.dst.Port()),
		Allowed: true, Reason: reason, BytesOut: c.out.Load(), BytesIn: c.in.Load(), Duration: time.Since(c.start), Open: open}
}

// decision is what pol says of c now (names already checked stay
// checked: their addresses are pinned).
func (c *conn) decision(pol netslot.Policy) decision {
	return verdict(pol, c.g.p.cfg.Upstream, c.dst, c.name, func() bool { return c.g.pinned(c.name, c.dst.Addr()) })
}

// stillAllowed reports whether pol allows c as it is: still allowed, and
// for a terminated connection still transformed (one that is not any
// more is cut, so that the sandbox reconnects end to end).
func (c *conn) stillAllowed(pol netslot.Policy) bool {
	d := c.decision(pol)
	return d.allow && (d.transform != nil) == c.mitm
}

// setUp records the destination's side; false if c was cut meanwhile.
func (c *conn) setUp(up net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.up = up
	return true
}

// cut closes both sides (reason, when set, is what the log says).
func (c *conn) cut(reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	if reason != "" {
		c.reason = reason
	}
	up := c.up
	c.mu.Unlock()
	_ = c.c.SetLinger(0)
	c.c.Close()
	if up != nil {
		up.Close()
	}
}

func (g *guest) acceptTCP(ln *net.TCPListener) {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		go g.serveTCP(c)
	}
}

// refuse resets a guest connection and logs the refusal.
func (g *guest) refuse(c *net.TCPConn, dst netip.AddrPort, name, reason string) {
	_ = c.SetLinger(0)
	c.Close()
	g.p.m.conns.WithLabelValues("denied", reason).Inc()
	e := Entry{Proto: "tcp", Host: name, Port: int(dst.Port()), Reason: reason}
	if dst.IsValid() {
		e.Addr = dst.Addr().String()
	}
	g.record(e)
	g.p.log.Debug("egress refused", "sandbox_id", g.id, "host", name, "addr", e.Addr, "port", e.Port, "reason", reason)
}

func (g *guest) serveTCP(c *net.TCPConn) {
	if !g.fromGuest(c.RemoteAddr()) {
		_ = c.SetLinger(0)
		c.Close()
		return
	}
	dst, err := netslot.OriginalDst(c)
	if err != nil {
		g.refuse(c, netip.AddrPort{}, "", ReasonBlocked)
		return
	}
	pol := g.policy()
	cfg := &g.p.cfg
	ctx := g.ctx
	var sn sniffed
	if needsName(pol) {
		wait := cfg.NameTimeout
		if verdict(pol, cfg.Upstream, dst, "", nil).allow {
			wait = cfg.SniffTimeout
		}
		sn = sniff(ctx, c, wait)
		pol = g.policy() // an update may have come meanwhile
	}
	d := verdict(pol, cfg.Upstream, dst, sn.name, func() bool { return g.resolvesTo(ctx, sn.name, dst.Addr()) })
	if d.transform != nil && sn.kind != kindTLS {
		// Transforms apply to HTTPS only: a secret never goes out in the
		// clear. Anything else to that host goes as it is.
		d.transform = nil
	}
	if !d.allow {
		g.refuse(c, dst, sn.name, d.reason)
		return
	}
	cc := &conn{g: g, c: c, dst: dst, name: sn.name, mitm: d.transform != nil, start: time.Now(), reason: d.reason}
	g.mu.Lock()
	if len(g.conns) >= cfg.MaxConns {
		g.mu.Unlock()
		g.refuse(c, dst, sn.name, ReasonClosed)
		return
	}
	g.conns[cc] = struct{}{}
	g.mu.Unlock()
	g.p.m.active.Inc()
	g.p.m.conns.WithLabelValues("allowed", d.reason).Inc()
	defer func() {
		g.p.m.active.Dec()
		g.mu.Lock()
		delete(g.conns, cc)
		g.mu.Unlock()
		cc.cut("")
		g.record(cc.entry(false))
	}()
	if cc.mitm {
		g.terminate(cc, replay(c, sn.buf), d)
		return
	}
	up, reason, err := g.dialUpstream(ctx, pol, dst, sn.name, d.byName)
	if err != nil {
		cc.mu.Lock()
		cc.reason = reason
		cc.mu.Unlock()
		g.p.log.Debug("egress upstream failed", "sandbox_id", g.id, "host", sn.name, "addr", dst.String(), "reason", reason, "error", err)
		return
	}
	if !cc.setUp(up) {
		up.Close()
		return
	}
	if len(sn.buf) > 0 {
		n, err := up.Write(sn.buf)
		cc.out.Add(int64(n))
		if err != nil {
			return
		}
	}
	splice(cc, c, up)
}

// splice copies both ways until both directions end, passing on each
// direction's end (half-close).
func splice(cc *conn, guest *net.TCPConn, up net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, _ := io.Copy(up, guest)
		cc.out.Add(n)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			up.Close()
		}
	}()
	n, _ := io.Copy(guest, up)
	cc.in.Add(n)
	_ = guest.CloseWrite()
	wg.Wait()
}

// dialUpstream connects to dst for the guest: directly, through the
// guarded dialer, or through the rules' SOCKS5 proxy, which gets the
// name when the connection was allowed by it (its own DNS then answers)
// and the address otherwise. A proxy that cannot be used fails the
// connection: there is no direct fallback.
func (g *guest) dialUpstream(ctx context.Context, pol netslot.Policy, dst netip.AddrPort, name string, byName bool) (net.Conn, string, error) {
	ctx, cancel := context.WithTimeout(ctx, g.p.cfg.DialTimeout)
	defer cancel()
	if px := proxyOf(pol); px != nil {
		host := dst.Addr().String()
		if byName && name != "" {
			host = name
		}
		c, err := socksConnect(ctx, g.p.dialer, px, host, dst.Port())
		if err != nil {
			return nil, ReasonProxyFailed, err
		}
		return c, "", nil
	}
	c, err := g.p.dialer.DialContext(ctx, "tcp4", dst.String())
	if err != nil {
		if egress.Refused(err) {
			return nil, ReasonBlocked, err
		}
		return nil, ReasonUpstreamFailed, err
	}
	return c, "", nil
}

func proxyOf(pol netslot.Policy) *egressrules.Proxy {
	if pol.Egress == nil {
		return nil
	}
	return pol.Egress.Proxy
}
