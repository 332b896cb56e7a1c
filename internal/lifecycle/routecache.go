package lifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/route"
)

// DefaultRouteCacheTTL is how long a running sandbox's route is served
// from memory when Config.SandboxChanges is set: the bound on how stale a
// route can be if a change notification is lost.
const DefaultRouteCacheTTL = 2 * time.Second

// routeCache keeps the routes of running sandboxes for a short time, so
// that a request through the proxy reads neither the store nor the node.
// Every change of a sandbox's row evicts its entry (Config.SandboxChanges:
// at once for this process's changes, by LISTEN/NOTIFY for other
// replicas'); the TTL bounds what a lost notification can leave.
type routeCache struct {
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	// live is set once the change feed is in effect: no entry is kept
	// before, since a change could not evict it.
	live bool
	// gen counts evictions: a lookup that began before one does not fill
	// the cache with what it read.
	gen     uint64
	entries map[string]routeEntry
}

type routeEntry struct {
	r  route.Route
	at time.Time
}

func newRouteCache(ttl time.Duration) *routeCache {
	return &routeCache{ttl: ttl, now: time.Now, entries: map[string]routeEntry{}}
}

// get returns the cached route of id, if fresh, and the generation a
// lookup that misses must hand to put.
func (c *routeCache) get(id string) (*route.Route, uint64, bool) {
	if c == nil {
		return nil, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if ok && c.now().Sub(e.at) < c.ttl {
		r := e.r
		r.HTTPSPorts = append([]int(nil), e.r.HTTPSPorts...)
		return &r, c.gen, true
	}
	if ok {
		delete(c.entries, id)
	}
	return nil, c.gen, false
}

// put keeps r unless an eviction happened since the lookup of generation
// gen began.
func (c *routeCache) put(gen uint64, r *route.Route) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live || gen != c.gen {
		return
	}
	e := routeEntry{r: *r, at: c.now()}
	e.r.Woken = false
	e.r.HTTPSPorts = append([]int(nil), r.HTTPSPorts...)
	c.entries[r.SandboxID] = e
	// Expired entries of sandboxes no longer asked for go now and then.
	if len(c.entries)%256 == 0 {
		for k, old := range c.entries {
			if c.now().Sub(old.at) >= c.ttl {
				delete(c.entries, k)
			}
		}
	}
}

// changed evicts id's entry; "" evicts every entry and marks the feed live
// (store.SQL.WatchSandboxes).
func (c *routeCache) changed(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if id == "" {
		c.live = true
		clear(c.entries)
		return
	}
	delete(c.entries, id)
}

// watchChanges feeds the store's sandbox changes to the route cache and
// the signature index until ctx ends.
func (m *Manager) watchChanges(ctx context.Context) {
	if m.cfg.SandboxChanges == nil {
		return
	}
	err := m.cfg.SandboxChanges(ctx, func(id string) {
		if m.routes != nil {
			m.routes.changed(id)
		}
		m.signs.changed(id)
	})
	if err != nil && ctx.Err() == nil {
		m.log.Warn("sandbox change feed stopped; routes are no longer cached", "error", err)
	}
	m.signs.stop()
	if m.routes == nil {
		return
	}
	m.routes.mu.Lock()
	m.routes.live = false
	clear(m.routes.entries)
	m.routes.mu.Unlock()
}
