package egressproxy

import (
	"context"
	"net/netip"
	"slices"
	"time"
)

// pinFor is how long a name's addresses stay pinned after the resolver
// gave them to the sandbox (or the proxy looked them up): a connection
// to one of them with that name counts as the name's meanwhile, whatever
// the name resolves to later (no rebinding).
const pinFor = 10 * time.Minute

// answerTTL is the TTL of the proxy resolver's answers: well below
// pinFor, so that a sandbox that honours it asks again before the pin
// ends.
const answerTTL = 60

// pin is a name's pinned addresses.
type pin struct {
	addrs []netip.Addr
	until time.Time
}

// pinAddrs pins addrs for name.
func (g *guest) pinAddrs(name string, addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pins) > 4096 {
		now := time.Now()
		for n, p := range g.pins {
			if now.After(p.until) {
				delete(g.pins, n)
			}
		}
		if len(g.pins) > 4096 {
			clear(g.pins)
		}
	}
	old := g.pins[name]
	all := append(slices.Clone(old.addrs), addrs...)
	slices.SortFunc(all, func(a, b netip.Addr) int { return a.Compare(b) })
	g.pins[name] = pin{addrs: slices.Compact(all), until: time.Now().Add(pinFor)}
}

func (g *guest) pinned(name string, a netip.Addr) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.pins[name]
	return ok && time.Now().Before(p.until) && slices.Contains(p.addrs, a)
}

// resolvesTo reports whether name resolves to a: pinned already, or
// looked up now (and then pinned).
func (g *guest) resolvesTo(ctx context.Context, name string, a netip.Addr) bool {
	if name == "" {
		return false
	}
	if g.pinned(name, a) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := g.p.cfg.Resolver.LookupNetIP(ctx, "ip4", name)
	if err != nil {
		return false
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	g.pinAddrs(name, addrs)
	return slices.Contains(addrs, a)
}
