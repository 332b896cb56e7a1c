// Package throttle bounds what one client may cost: a token bucket per
// client address, for failed authentications (the API's admin token and
// team keys) and for the edge proxy's signed-URL lookups. A client is its
// peer address (an IPv6 address by its /64, what one host is given), or,
// behind a trusted reverse proxy, the address that proxy forwarded for: so
// that one tenant's failures spend only its own budget, never the
// operator's (docs/security.md, "Throttling").
package throttle

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// DefaultMaxClients is how many client addresses a Limiter tracks.
const DefaultMaxClients = 65536

// overflow is the shared key of the clients past MaxClients.
const overflow = "overflow"

// Config configures a Limiter.
type Config struct {
	// Burst is how many tokens a client starts with and may save up.
	Burst int
	// Every is how long one spent token takes to come back.
	Every time.Duration
	// MaxClients bounds the addresses tracked (default DefaultMaxClients):
	// past it, and once those whose budget is whole again are forgotten,
	// new addresses share one budget, so that memory stays bounded under
	// an attack from very many addresses.
	MaxClients int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Limiter is a set of token buckets, one per client key. It is safe for
// concurrent use. The zero Limiter is not usable; a nil one allows all.
type Limiter struct {
	cfg Config

	mu sync.Mutex
	m  map[string]*bucket
	// noPruneUntil: a prune that freed nothing is not tried again before.
	noPruneUntil time.Time
}

// bucket is a client's budget: tokens at the time at. Tokens may go below
// zero (failures of requests that were let in together): the debt is paid
// back before the client is let in again.
type bucket struct {
	tokens float64
	at     time.Time
}

// New returns a Limiter of cfg's budget.
func New(cfg Config) *Limiter {
	if cfg.Burst < 1 {
		cfg.Burst = 1
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Limiter{cfg: cfg, m: map[string]*bucket{}}
}

// Allow reports whether key has a token, without spending it; when not,
// retry is how long until it has one.
func (l *Limiter) Allow(key string) (ok bool, retry time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.peek(key)
	if b == nil {
		return true, 0
	}
	return l.check(b, l.cfg.Now())
}

// Spend takes one of key's tokens, going into debt if it has none: a
// failure that is counted after the request was let in.
func (l *Limiter) Spend(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	b := l.get(key, now)
	l.fill(b, now)
	if b.tokens > -float64(l.cfg.Burst) {
		b.tokens--
	}
}

// Take spends one of key's tokens if it has one: a costly request
// counted before it is served. When it has none, retry is how long until
// it has one.
func (l *Limiter) Take(key string) (ok bool, retry time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	b := l.get(key, now)
	if ok, retry := l.check(b, now); !ok {
		return false, retry
	}
	b.tokens--
	return true, 0
}

// check brings b up to now and reports whether it holds a token.
func (l *Limiter) check(b *bucket, now time.Time) (bool, time.Duration) {
	l.fill(b, now)
	if b.tokens >= 1 {
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) * float64(l.cfg.Every))
}

func (l *Limiter) fill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(float64(l.cfg.Burst), b.tokens+float64(d)/float64(l.cfg.Every))
		b.at = now
	}
}

// peek returns key's bucket, or the shared one when key is not tracked
// and the table is full; nil when key has a whole budget.
func (l *Limiter) peek(key string) *bucket {
	if b, ok := l.m[key]; ok {
		return b
	}
	if len(l.m) >= l.cfg.MaxClients {
		return l.m[overflow]
	}
	return nil
}

// get returns key's bucket, making it (or choosing the shared one).
func (l *Limiter) get(key string, now time.Time) *bucket {
	if b, ok := l.m[key]; ok {
		return b
	}
	if len(l.m) >= l.cfg.MaxClients {
		l.prune(now)
	}
	if len(l.m) >= l.cfg.MaxClients {
		key = overflow
		if b, ok := l.m[key]; ok {
			return b
		}
	}
	b := &bucket{tokens: float64(l.cfg.Burst), at: now}
	l.m[key] = b
	return b
}

// prune forgets the clients whose budget is whole again.
func (l *Limiter) prune(now time.Time) {
	if now.Before(l.noPruneUntil) {
		return
	}
	n := len(l.m)
	for k, b := range l.m {
		if l.fill(b, now); b.tokens >= float64(l.cfg.Burst) {
			delete(l.m, k)
		}
	}
	if len(l.m) == n {
		l.noPruneUntil = now.Add(l.cfg.Every)
	}
}

// Client is the key of r's client: the IP of its peer, an IPv6 address by
// its /64 (one host's share of a network); or, when the peer is one of
// trusted (reverse proxies the operator runs), the right-most address of
// X-Forwarded-For that is not trusted.
func Client(r *http.Request, trusted []netip.Prefix) string {
	peer := parseAddr(r.RemoteAddr)
	if peer.IsValid() && contains(trusted, peer) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			a := parseAddr(strings.TrimSpace(hops[i]))
			if !a.IsValid() {
				break // what is left of it was not written by a trusted proxy
			}
			peer = a
			if !contains(trusted, a) {
				break
			}
		}
	}
	if !peer.IsValid() {
		return r.RemoteAddr
	}
	if peer.Is6() {
		p, _ := peer.Prefix(64)
		return p.String()
	}
	return peer.String()
}

// parseAddr reads "ip", "ip:port" or "[ip]:port", 4-in-6 unmapped.
func parseAddr(s string) netip.Addr {
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

func contains(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParsePrefixes reads CIDRs or single addresses (a /32 or /128), for the
// --trusted-proxy flag.
func ParsePrefixes(ss []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR or an IP address: %w", s, errdefs.ErrInvalid)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
