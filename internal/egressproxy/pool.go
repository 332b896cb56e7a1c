package egressproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
)

// Pool is a netslot.Pool whose slots with egress rules are put behind the
// proxy: their listeners are started and their redirects set as they are
// acquired, updated and adopted, and stopped as they are released.
type Pool struct {
	inner netslot.Pool
	px    *Proxy
}

var _ netslot.Pool = (*Pool)(nil)

// NewPool wraps inner.
func NewPool(inner netslot.Pool, px *Proxy) *Pool { return &Pool{inner: inner, px: px} }

// Proxy returns the pool's proxy.
func (p *Pool) Proxy() *Proxy { return p.px }

// Acquire implements netslot.Pool.
func (p *Pool) Acquire(ctx context.Context, id string, pol netslot.Policy) (*netslot.Slot, error) {
	pol.Redirect = nil
	if err := p.checkProxy(ctx, pol); err != nil {
		return nil, fmt.Errorf("network slot for sandbox %q: %w", id, err)
	}
	s, err := p.inner.Acquire(ctx, id, pol)
	if err != nil || pol.Egress == nil {
		return s, err
	}
	if err := p.attach(ctx, s, pol); err != nil {
		if rerr := p.inner.Release(context.WithoutCancel(ctx), s); rerr != nil {
			p.px.log.Warn("network slot rollback", "sandbox_id", id, "error", rerr)
		}
		return nil, fmt.Errorf("network slot for sandbox %q: %w", id, err)
	}
	return s, nil
}

// attach starts s's listeners and redirects s to them.
func (p *Pool) attach(ctx context.Context, s *netslot.Slot, pol netslot.Policy) error {
	ports, err := p.px.Attach(s.NetNS, s.SandboxID, s.HostIP, s.GuestIP, pol)
	if err != nil {
		return err
	}
	pol.Redirect = &ports
	if err := p.inner.Update(ctx, s, pol); err != nil {
		p.px.Detach(s.NetNS)
		return err
	}
	return nil
}

// Update implements netslot.Pool: connections opened after it follow
// pol; the proxy cuts the open ones it no longer allows.
func (p *Pool) Update(ctx context.Context, s *netslot.Slot, pol netslot.Policy) error {
	pol.Redirect = nil
	if err := p.checkProxy(ctx, pol); err != nil {
		return fmt.Errorf("network slot of sandbox %q: %w", s.SandboxID, err)
	}
	if pol.Egress == nil {
		if err := p.inner.Update(ctx, s, pol); err != nil {
			return err
		}
		// Connections through the proxy stay while the new lists allow
		// them; new ones no longer come.
		p.px.Update(s.NetNS, pol)
		p.px.StopListening(s.NetNS)
		return nil
	}
	if err := p.attach(ctx, s, pol); err != nil {
		return err
	}
	p.px.Update(s.NetNS, pol)
	return nil
}

// Release implements netslot.Pool.
func (p *Pool) Release(ctx context.Context, s *netslot.Slot) error {
	if s != nil {
		p.px.Detach(s.NetNS)
	}
	return p.inner.Release(ctx, s)
}

// Adopt implements netslot.Pool: a slot behind the proxy gets listeners
// of this process before its redirects are put back.
func (p *Pool) Adopt(ctx context.Context, s *netslot.Slot) error {
	if s == nil || s.Policy.Egress == nil {
		return p.inner.Adopt(ctx, s)
	}
	pol := s.Policy.Clone()
	pol.Redirect = nil
	ports, err := p.px.Attach(s.NetNS, s.SandboxID, s.HostIP, s.GuestIP, pol)
	if err != nil {
		return err
	}
	s.Policy.Redirect = &ports
	if err := p.inner.Adopt(ctx, s); err != nil {
		p.px.Detach(s.NetNS)
		return err
	}
	return nil
}

// ReclaimLeaked implements netslot.Pool.
func (p *Pool) ReclaimLeaked(ctx context.Context, keep map[string]bool) (int, error) {
	return p.inner.ReclaimLeaked(ctx, keep)
}

// Rearm passes on to the inner pool's (netslot's: see node keep.go).
func (p *Pool) Rearm(ctx context.Context, s *netslot.Slot) error {
	r, ok := p.inner.(interface {
		Rearm(context.Context, *netslot.Slot) error
	})
	if !ok {
		return fmt.Errorf("network slot rearm: %w", errdefs.ErrUnsupported)
	}
	return r.Rearm(ctx, s)
}

// CACert returns sandbox id's egress CA certificate (PEM).
func (p *Pool) CACert(id string) ([]byte, error) { return p.px.CACert(id) }

// EgressLog returns sandbox id's egress log.
func (p *Pool) EgressLog(id string) ([]Entry, error) { return p.px.Log(id) }

// checkProxy refuses a SOCKS proxy the sandbox could never use: an
// address that is not host:port, a name that does not resolve, or one
// that resolves only to addresses the proxy never connects to (private,
// loopback, the host's own).
func (p *Pool) checkProxy(ctx context.Context, pol netslot.Policy) error {
	px := proxyOf(pol)
	if px == nil {
		return nil
	}
	host, port, err := net.SplitHostPort(px.Address)
	if err != nil || host == "" || port == "" {
		return errdefs.Publicf(errdefs.ErrInvalid, "network.egressProxy.address %q: want host:port", px.Address)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		addrs, err = p.px.hostResolver().LookupNetIP(ctx, "ip4", host)
		if err != nil {
			return errdefs.Publicf(errdefs.ErrInvalid, "network.egressProxy.address %q: the host name does not resolve", px.Address)
		}
	}
	pn, _ := net.LookupPort("tcp", port)
	var refused []string
	for _, a := range addrs {
		if err := p.px.cfg.Upstream.Check(netip.AddrPortFrom(a.Unmap(), uint16(pn))); err == nil {
			return nil
		}
		refused = append(refused, a.String())
	}
	return errdefs.Publicf(errdefs.ErrInvalid, "network.egressProxy.address %q: %s is not an address sandboxes' traffic may reach (private, loopback or this host's)", px.Address, strings.Join(refused, ", "))
}

// hostResolver resolves the names the host dials for a sandbox (a SOCKS
// proxy's), as the guarded dialer does.
func (p *Proxy) hostResolver() Resolver { return net.DefaultResolver }
