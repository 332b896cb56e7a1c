package node

import (
	"fmt"
	"sync"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// warmPools are the agent's warm pools (pool.go), node-wide state with a
// lock of its own. Its mu guards the pools, the reserved members and the
// counts of members being made and claims in flight; it is taken after
// Agent.mu and before any handle's mu (node.go), and never held while a
// goroutine starts or a sandbox is made or destroyed: its methods decide,
// the agent acts. saveMu orders the writes of pools.json.
type warmPools struct {
	pm       poolMetrics
	saveMu   sync.Mutex
	mu       sync.Mutex
	byTmpl   map[string]*pool   // by template ID
	reserved map[string]*handle // members handed out by reserve
	making   int                // members being made, all pools
	claiming int                // claims in flight
	// closed: the agent closed; no member joins or is made.
	closed bool
}

// pool is one template's warm pool; warmPools.mu guards it.
type pool struct {
	tmpl   nodeapi.Template
	res    sandbox.Resources
	size   int
	ready  []*handle
	making int
	hits   int64
	misses int64
	// following is the build a switch was started to (reserve).
	following string
}

// set sets tmpl's pool (size 0 removes it) and returns the members that
// go.
func (ps *warmPools) set(tmpl nodeapi.Template, res sandbox.Resources, size int) ([]*handle, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil, fmt.Errorf("node agent: %w", errdefs.ErrUnavailable)
	}
	p := ps.byTmpl[tmpl.ID]
	var drop []*handle
	if p != nil && (p.tmpl.BuildID != tmpl.BuildID || p.res != res) {
		// The template (or the members' shape) changed: its members go.
		drop, p.ready = p.ready, nil
	}
	if size == 0 {
		if p != nil {
			drop = append(drop, p.ready...)
			delete(ps.byTmpl, tmpl.ID)
			ps.pm.ready.DeleteLabelValues(tmpl.ID)
		}
		return drop, nil
	}
	if p == nil {
		p = &pool{}
		ps.byTmpl[tmpl.ID] = p
	}
	p.tmpl, p.res, p.size = tmpl, res, size
	if len(p.ready) > size {
		drop = append(drop, p.ready[size:]...)
		p.ready = p.ready[:size]
	}
	ps.pm.ready.WithLabelValues(tmpl.ID).Set(float64(len(p.ready)))
	return drop, nil
}

// buildSwitch is a pool's switch to a template's new build, for the agent
// to start (Reserve).
type buildSwitch struct {
	tmpl nodeapi.Template
	res  sandbox.Resources
	size int
	from string
}

// reserve takes a ready member of tmpl's pool that serves res out of the
// pool. A create that asks for another build of a pooled template misses
// and returns the pool's switch to that build, once per build.
func (ps *warmPools) reserve(tmpl nodeapi.Template, res sandbox.Resources) (*handle, *buildSwitch) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.byTmpl[tmpl.ID]
	var sw *buildSwitch
	if p != nil && p.tmpl.BuildID != tmpl.BuildID && !ps.closed && p.following != tmpl.BuildID && (tmpl.RootFS != "" || tmpl.SnapshotDir != "") {
		p.following = tmpl.BuildID
		sw = &buildSwitch{tmpl: tmpl, res: p.res, size: p.size, from: p.tmpl.BuildID}
	}
	if p == nil || p.tmpl.BuildID != tmpl.BuildID || !p.serves(res) || len(p.ready) == 0 {
		ps.pm.claims.WithLabelValues(templateLabel(tmpl.ID), "miss").Inc()
		if p != nil {
			p.misses++
		}
		return nil, sw
	}
	p.hits++
	h := p.ready[len(p.ready)-1]
	p.ready = p.ready[:len(p.ready)-1]
	ps.reserved[h.id] = h
	ps.pm.claims.WithLabelValues(tmpl.ID, "hit").Inc()
	ps.pm.ready.WithLabelValues(tmpl.ID).Set(float64(len(p.ready)))
	return h, sw
}

// unreserve takes member id out of the reserved set and puts it back in
// its pool if the pool still wants it (back); nil when id is not
// reserved.
func (ps *warmPools) unreserve(id string) (h *handle, back bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	h, ok := ps.reserved[id]
	delete(ps.reserved, id)
	if !ok {
		return nil, false
	}
	st := h.get()
	p := ps.byTmpl[st.rec.Template.ID]
	back = p != nil && !st.gone && p.tmpl.BuildID == st.rec.Template.BuildID && p.res == st.rec.Resources && len(p.ready) < p.size
	if back {
		p.ready = append(p.ready, h)
		ps.pm.ready.WithLabelValues(p.tmpl.ID).Set(float64(len(p.ready)))
	}
	return h, back
}

// status is every pool's state.
func (ps *warmPools) status() map[string]nodeapi.PoolStatus {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := map[string]nodeapi.PoolStatus{}
	for id, p := range ps.byTmpl {
		out[id] = nodeapi.PoolStatus{BuildID: p.tmpl.BuildID, Size: p.size, Ready: len(p.ready), Making: p.making, Hits: p.hits, Misses: p.misses}
	}
	return out
}

// close closes the pools, empties them and the reserved set and returns
// their members, for Close to destroy.
func (ps *warmPools) close() []*handle {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.closed = true
	var out []*handle
	for id, p := range ps.byTmpl {
		out = append(out, p.ready...)
		p.ready = nil
		ps.pm.ready.WithLabelValues(id).Set(0)
	}
	for id, h := range ps.reserved {
		out = append(out, h)
		delete(ps.reserved, id)
	}
	return out
}

// memberJob is a member of pool p to make, of tmpl and res.
type memberJob struct {
	p    *pool
	tmpl nodeapi.Template
	res  sandbox.Resources
}

// due drops the gone members and returns the members the pools lack,
// within limit members made at once, counted as being made; none while
// a claim is in flight (claims first).
func (ps *warmPools) due(limit int) []memberJob {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed || ps.claiming > 0 {
		return nil
	}
	var out []memberJob
	for _, p := range ps.byTmpl {
		live := p.ready[:0]
		for _, h := range p.ready {
			if !h.isGone() {
				live = append(live, h)
			}
		}
		p.ready = live
		for len(p.ready)+p.making < p.size && ps.making < limit {
			p.making++
			ps.making++
			out = append(out, memberJob{p: p, tmpl: p.tmpl, res: p.res})
		}
	}
	return out
}

// made ends the making of j's member, h when ok, and says whether h
// joined j's pool: only if that is still the template's pool and still
// wants a member of j's build and resources.
func (ps *warmPools) made(j memberJob, h *handle, ok bool) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.making--
	p := j.p
	p.making--
	keep := ok && ps.byTmpl[j.tmpl.ID] == p && p.tmpl.BuildID == j.tmpl.BuildID && p.res == j.res && len(p.ready) < p.size && !ps.closed
	if keep {
		p.ready = append(p.ready, h)
		ps.pm.ready.WithLabelValues(j.tmpl.ID).Set(float64(len(p.ready)))
	}
	return keep
}

// beginClaim takes reserved member id out of the reserved set and counts
// a claim in flight; nil when id is no reserved member.
func (ps *warmPools) beginClaim(id string) *handle {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	h, ok := ps.reserved[id]
	if !ok {
		return nil
	}
	delete(ps.reserved, id)
	ps.claiming++
	return h
}

func (ps *warmPools) endClaim() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.claiming--
}

// config is the pools' configuration now.
func (ps *warmPools) config() []poolConfig {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []poolConfig
	for _, p := range ps.byTmpl {
		out = append(out, poolConfig{Template: p.tmpl, Resources: p.res, Size: p.size})
	}
	return out
}
