// Package egressproxy is the host-side egress proxy of sandboxes whose
// network rules name hosts (E2B's network.allowOut domains,
// network.rules header transforms, network.egressProxy).
//
// Such a sandbox's slot (internal/netslot) forwards nothing new by
// itself: its TCP connections are redirected to listeners of this proxy
// on the slot's host address, its DNS questions (UDP and TCP port 53) to
// the proxy's resolver. For each connection the proxy reads the address
// the sandbox dialled (SO_ORIGINAL_DST) and, when the rules depend on it,
// the name the connection carries (the TLS SNI or the HTTP Host), decides
// (decide.go), and then either splices the connection to the address
// dialled (never to another), or, for a host with a header transform,
// terminates its TLS with the sandbox's own CA (ca.go), sets the headers
// (secrets filled in on the host side) and sends the requests over a
// verified TLS connection to that address (mitm.go). Every upstream
// connection goes through the guarded dialer (internal/egress): private,
// loopback, link-local and the host's own addresses are never reached,
// whatever a rule says. A name counts only if it resolves to the address
// dialled; the resolver answers only names the rules allow (unless the
// sandbox may reach any public address anyway) and pins its answers.
//
// Pool (pool.go) wraps a netslot.Pool so that slots whose policy has
// egress rules get their listeners and redirects as they are made,
// updated, adopted and released.
package egressproxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
)

// Resolver resolves host names for sandboxes (*net.Resolver is one).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Proxy.
type Config struct {
	// Upstream decides which addresses the proxy may connect to for a
	// sandbox; nil allows public addresses only (egress.Public, the host's
	// own excluded). The operator's exceptions go here
	// (--egress-proxy-allow), not the host's own --egress-allow.
	Upstream *egress.Policy
	// Resolver answers the sandboxes' DNS questions and checks names
	// against addresses; nil: the host's resolver (/etc/resolv.conf).
	Resolver Resolver
	// RootCAs verify the destinations' TLS certificates when a transform
	// terminates a sandbox's TLS; nil: the host's roots.
	RootCAs *x509.CertPool
	// CASecret (SecretSize bytes) is the node's secret each sandbox's CA
	// is derived from; required.
	CASecret []byte
	// SniffTimeout bounds the wait for a connection's first bytes when
	// its address alone would be allowed (a protocol where the server
	// speaks first sends none); default 300 ms. NameTimeout bounds it when
	// only a name could allow the connection; default 10 s.
	SniffTimeout, NameTimeout time.Duration
	// DialTimeout bounds a connect upstream (default 10 s).
	DialTimeout time.Duration
	// MaxConns bounds the open connections of one sandbox (default 1024).
	MaxConns int
	// LogEntries is the length of each sandbox's egress log (default
	// 1000).
	LogEntries int
	Logger     *slog.Logger
	Registry   prometheus.Registerer
}

// Proxy is the node's egress proxy. It is safe for concurrent use.
type Proxy struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	dialer *egress.Dialer

	mu     sync.Mutex
	guests map[string]*guest // by slot (namespace name)
	logs   map[string]*ring  // by sandbox ID, kept a while after its slot goes
	order  []string          // sandbox IDs of logs, oldest first
	cas    map[string]*sandboxCA
}

// keptLogs is how many sandboxes' logs are kept (those of sandboxes with
// a slot and the most recent others).
const keptLogs = 512

// New returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	if len(cfg.CASecret) != SecretSize {
		return nil, fmt.Errorf("egress proxy: CA secret of %d bytes, want %d: %w", len(cfg.CASecret), SecretSize, errdefs.ErrInvalid)
	}
	if cfg.Upstream == nil {
		cfg.Upstream = egress.MustParse()
	}
	if cfg.Resolver == nil {
		cfg.Resolver = &net.Resolver{PreferGo: true}
	}
	if cfg.SniffTimeout <= 0 {
		cfg.SniffTimeout = 300 * time.Millisecond
	}
	if cfg.NameTimeout <= 0 {
		cfg.NameTimeout = 10 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1024
	}
	if cfg.LogEntries <= 0 {
		cfg.LogEntries = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("egress proxy metrics: %w", err)
	}
	return &Proxy{
		cfg: cfg, log: cfg.Logger, m: m,
		dialer: &egress.Dialer{Policy: cfg.Upstream, Timeout: cfg.DialTimeout},
		guests: map[string]*guest{}, logs: map[string]*ring{}, cas: map[string]*sandboxCA{},
	}, nil
}

// guest is one slot behind the proxy.
type guest struct {
	p      *Proxy
	key    string // the slot's namespace name
	id     string // sandbox ID
	host   netip.Addr
	addr   netip.Addr
	pol    atomic.Pointer[netslot.Policy]
	log    *ring
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	pins      map[string]pin
	conns     map[*conn]struct{}
	listeners []interface{ Close() error }
	ports     netslot.Redirect
}

// Attach puts the slot key (of sandbox id, host address host, guest
// address addr) behind the proxy with policy pol: it starts the slot's
// listeners, if they are not running, and returns their ports (for the
// slot's redirect).
func (p *Proxy) Attach(key, id string, host, addr netip.Addr, pol netslot.Policy) (netslot.Redirect, error) {
	p.mu.Lock()
	g := p.guests[key]
	if g == nil {
		ctx, cancel := context.WithCancel(context.Background())
		g = &guest{p: p, key: key, id: id, host: host, addr: addr, log: p.logLocked(id), ctx: ctx, cancel: cancel,
			pins: map[string]pin{}, conns: map[*conn]struct{}{}}
		p.guests[key] = g
	}
	p.mu.Unlock()
	pc := pol.Clone()
	g.pol.Store(&pc)
	if err := g.listen(); err != nil {
		p.Detach(key)
		return netslot.Redirect{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ports, nil
}

// logLocked returns sandbox id's log, making it if needed; p.mu is held.
func (p *Proxy) logLocked(id string) *ring {
	if r := p.logs[id]; r != nil {
		return r
	}
	r := newRing(p.cfg.LogEntries)
	p.logs[id] = r
	p.order = append(p.order, id)
	for len(p.order) > keptLogs {
		old := p.order[0]
		busy := false
		for _, g := range p.guests {
			busy = busy || g.id == old
		}
		if busy {
			break
		}
		p.order = p.order[1:]
		delete(p.logs, old)
		delete(p.cas, old)
	}
	return r
}

// Update replaces the policy of slot key: connections opened after it
// follow pol, and open connections it no longer allows are cut.
func (p *Proxy) Update(key string, pol netslot.Policy) {
	g := p.guest(key)
	if g == nil {
		return
	}
	pc := pol.Clone()
	g.pol.Store(&pc)
	g.mu.Lock()
	clear(g.pins)
	conns := make([]*conn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, c := range conns {
		if !c.stillAllowed(pc) {
			c.cut(ReasonUpdated)
		}
	}
}

// StopListening closes slot key's listeners (its slot is no longer
// redirected); its open connections stay until they end or Detach.
func (p *Proxy) StopListening(key string) {
	if g := p.guest(key); g != nil {
		g.closeListeners()
	}
}

// Detach takes slot key from behind the proxy: its listeners and its
// connections are closed.
func (p *Proxy) Detach(key string) {
	p.mu.Lock()
	g := p.guests[key]
	delete(p.guests, key)
	p.mu.Unlock()
	if g == nil {
		return
	}
	g.cancel()
	g.closeListeners()
	g.mu.Lock()
	conns := make([]*conn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, c := range conns {
		c.cut("")
	}
}

func (p *Proxy) guest(key string) *guest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.guests[key]
}

// CACert returns sandbox id's CA certificate (PEM), the one its trust
// store must hold for the hosts its rules transform.
func (p *Proxy) CACert(id string) ([]byte, error) {
	ca, err := p.ca(id)
	if err != nil {
		return nil, err
	}
	return ca.pem, nil
}

func (p *Proxy) ca(id string) (*sandboxCA, error) {
	p.mu.Lock()
	ca := p.cas[id]
	p.mu.Unlock()
	if ca != nil {
		return ca, nil
	}
	ca, err := deriveCA(p.cfg.CASecret, id)
	if err != nil {
		return nil, fmt.Errorf("egress CA of sandbox %q: %w", id, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.cas[id]; old != nil {
		return old, nil
	}
	p.cas[id] = ca
	return ca, nil
}

// Log returns sandbox id's egress log, oldest first, with its open
// connections last; ErrNotFound when the proxy has none for it.
func (p *Proxy) Log(id string) ([]Entry, error) {
	p.mu.Lock()
	r := p.logs[id]
	var gs []*guest
	for _, g := range p.guests {
		if g.id == id {
			gs = append(gs, g)
		}
	}
	p.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("egress log of sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	out := r.entries()
	for _, g := range gs {
		g.mu.Lock()
		for c := range g.conns {
			out = append(out, c.entry(true))
		}
		g.mu.Unlock()
	}
	return out, nil
}

// Close detaches every slot.
func (p *Proxy) Close() error {
	p.mu.Lock()
	keys := make([]string, 0, len(p.guests))
	for k := range p.guests {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	for _, k := range keys {
		p.Detach(k)
	}
	return nil
}

// listen starts the guest's listeners on its host address if they are
// not running.
func (g *guest) listen() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.listeners) > 0 {
		return nil
	}
	hostAny := netip.AddrPortFrom(g.host, 0)
	tcp, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(hostAny))
	if err != nil {
		return fmt.Errorf("egress proxy listener on %s: %w", g.host, errors.Join(errdefs.ErrUnavailable, err))
	}
	dnsTCP, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(hostAny))
	if err != nil {
		tcp.Close()
		return fmt.Errorf("egress DNS listener on %s: %w", g.host, errors.Join(errdefs.ErrUnavailable, err))
	}
	udp, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(hostAny))
	if err != nil {
		tcp.Close()
		dnsTCP.Close()
		return fmt.Errorf("egress DNS listener on %s: %w", g.host, errors.Join(errdefs.ErrUnavailable, err))
	}
	g.listeners = []interface{ Close() error }{tcp, dnsTCP, udp}
	g.ports = netslot.Redirect{
		TCP:    uint16(tcp.Addr().(*net.TCPAddr).Port),
		DNSTCP: uint16(dnsTCP.Addr().(*net.TCPAddr).Port),
		DNSUDP: uint16(udp.LocalAddr().(*net.UDPAddr).Port),
	}
	go g.acceptTCP(tcp)
	go g.serveDNSTCP(dnsTCP)
	go g.serveDNSUDP(udp)
	return nil
}

func (g *guest) closeListeners() {
	g.mu.Lock()
	ls := g.listeners
	g.listeners = nil
	g.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
}

// fromGuest reports whether a peer address is the guest's own.
func (g *guest) fromGuest(a net.Addr) bool {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	}
	return ip.Unmap() == g.addr
}

func (g *guest) policy() netslot.Policy { return *g.pol.Load() }

// record adds e to the guest's log and counts it.
func (g *guest) record(e Entry) {
	e.Time = time.Now().UTC()
	g.log.add(e)
	if e.Proto == "dns" {
		g.p.m.dns.WithLabelValues(decisionLabel(e.Allowed)).Inc()
		return
	}
	g.p.m.bytes.WithLabelValues("out").Add(float64(e.BytesOut))
	g.p.m.bytes.WithLabelValues("in").Add(float64(e.BytesIn))
}
