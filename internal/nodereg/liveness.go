package nodereg

import (
	"context"
	"time"

	"github.com/warren-sandbox/warren/internal/store"
)

// Liveness defaults.
const (
	DefaultUnreachableAfter = 15 * time.Second
	DefaultLostAfter        = 5 * time.Minute
	DefaultPausedLostAfter  = time.Hour
	DefaultCheckInterval    = 2 * time.Second
)

// LivenessConfig tunes Liveness; zero fields take the defaults above.
type LivenessConfig struct {
	// UnreachableAfter without a heartbeat, a node gets no placements.
	UnreachableAfter time.Duration
	// LostAfter without a heartbeat, its running sandboxes are killed
	// with node_lost.
	LostAfter time.Duration
	// PausedLostAfter without a heartbeat, its paused sandboxes too (their
	// snapshot lives on that node, which may yet come back).
	PausedLostAfter time.Duration
	// Interval is the time between two checks.
	Interval time.Duration
	// Leading, when set, is asked before every check.
	Leading func() bool
}

// WithDefaults returns c with its zero fields set to the defaults.
func (c LivenessConfig) WithDefaults() LivenessConfig {
	c.setDefaults()
	return c
}

func (c *LivenessConfig) setDefaults() {
	if c.UnreachableAfter <= 0 {
		c.UnreachableAfter = DefaultUnreachableAfter
	}
	if c.LostAfter <= 0 {
		c.LostAfter = DefaultLostAfter
	}
	if c.LostAfter < c.UnreachableAfter {
		c.LostAfter = c.UnreachableAfter
	}
	if c.PausedLostAfter <= 0 {
		c.PausedLostAfter = DefaultPausedLostAfter
	}
	if c.PausedLostAfter < c.LostAfter {
		c.PausedLostAfter = c.LostAfter
	}
	if c.Interval <= 0 {
		c.Interval = DefaultCheckInterval
	}
}

// RunLiveness checks the nodes' heartbeats every cfg.Interval until ctx
// ends. It runs for one leader term (leader.Elector.While): the term
// begins when it is called, and silence from before then is silence this
// replica could not hear (the control plane was down, partitioned, or
// another replica led and went away), so every node gets a full window
// from that moment (CheckLiveness's since).
func (r *Registry) RunLiveness(ctx context.Context, cfg LivenessConfig) {
	cfg.setDefaults()
	since := time.Now()
	r.log.Info("node liveness: every node has a full window from now", "unreachable_after", cfg.UnreachableAfter.String(),
		"lost_after", cfg.LostAfter.String(), "paused_lost_after", cfg.PausedLostAfter.String())
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		if cfg.Leading == nil || cfg.Leading() {
			if err := r.CheckLiveness(ctx, time.Now(), since, cfg); err != nil && ctx.Err() == nil {
				r.log.Warn("node liveness check", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CheckLiveness applies the liveness rules once, as of now, for a term
// that began at since (the zero time: heard for ever). A node's silence
// counts from its last heartbeat or since, whichever is later: ready
// nodes silent for UnreachableAfter become unreachable, those silent for
// LostAfter lost. The running sandboxes of every lost node are killed with
// node_lost and its reservations dropped, and its paused sandboxes too
// once it has been silent for PausedLostAfter; each kill is made only
// while the node is still lost (a heartbeat that lands meanwhile stops
// them). A node's change of state is made by one statement and logged by
// the replica that made it; the kills are repeated at every check while
// any remain (a replica that stopped half-way leaves them to the next
// check), each recorded once since a killed sandbox is not killed again.
func (r *Registry) CheckLiveness(ctx context.Context, now, since time.Time, cfg LivenessConfig) error {
	cfg.setDefaults()
	heard := now.Sub(since) // how long this term has listened
	if heard >= cfg.UnreachableAfter {
		ids, err := r.nodes.MarkStaleNodes(ctx, now.Add(-cfg.UnreachableAfter), store.NodeUnreachable, store.NodeReady)
		if err != nil {
			return err
		}
		for _, id := range ids {
			r.log.Warn("node unreachable: no placements", "node_id", id, "silent_for", cfg.UnreachableAfter.String())
		}
	}
	if heard < cfg.LostAfter {
		return nil
	}
	ids, err := r.nodes.MarkStaleNodes(ctx, now.Add(-cfg.LostAfter), store.NodeLost, store.NodeUnreachable, store.NodeReady)
	if err != nil {
		return err
	}
	for _, id := range ids {
		r.log.Warn("node lost: its running sandboxes are killed", "node_id", id, "silent_for", cfg.LostAfter.String())
	}
	nodes, err := r.nodes.ListNodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Liveness != store.NodeLost {
			continue
		}
		states := store.ActiveStates
		if !later(n.LastHeartbeat, since).After(now.Add(-cfg.PausedLostAfter)) {
			states = store.LiveStates // the paused ones too
		}
		if err := r.killLost(ctx, n.ID, states, true); err != nil {
			return err
		}
		if n.Allocated != (store.NodeResources{}) {
			if err := r.nodes.ClearNodeReservations(ctx, n.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
