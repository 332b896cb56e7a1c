package placement

import (
	"context"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/store"
)

// Watch implements nodeapi.Service: the events of every node that is not
// lost, merged, until ctx ends. A node reports on its own sandboxes only:
// an event passes when the sandbox's store row places it on that node and
// the event names its current execution (ownEvent); any other is dropped
// and counted (placement_node_events_refused_total). Nodes that register later are watched from
// the next refresh; a node whose stream ends is watched again from the one
// after. A sandbox that exited or was killed by its node gives its
// reservation back.
func (s *Service) Watch(ctx context.Context) (<-chan nodeapi.Event, error) {
	out := make(chan nodeapi.Event, 64)
	go s.watchAll(ctx, out)
	return out, nil
}

func (s *Service) watchAll(ctx context.Context, out chan<- nodeapi.Event) {
	var wg sync.WaitGroup
	defer func() { wg.Wait(); close(out) }()
	type watcher struct {
		addr   string
		cancel context.CancelFunc
		done   chan struct{}
	}
	watching := map[string]*watcher{} // node ID → its stream
	defer func() {
		for _, w := range watching {
			w.cancel()
		}
	}()
	t := time.NewTicker(s.cfg.WatchRefresh)
	defer t.Stop()
	for {
		nodes, err := s.liveNodes(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("watch: list nodes", "error", err)
		}
		live := map[string]bool{}
		for _, n := range nodes {
			live[n.ID] = true
			if w, ok := watching[n.ID]; ok {
				select {
				case <-w.done: // ended: watch again
				default:
					if w.addr == n.RPCAddress {
						continue
					}
					w.cancel() // the node moved
				}
			}
			wctx, cancel := context.WithCancel(ctx)
			w := &watcher{addr: n.RPCAddress, cancel: cancel, done: make(chan struct{})}
			watching[n.ID] = w
			wg.Go(func() {
				defer close(w.done)
				s.watchNode(wctx, n, out)
			})
		}
		if err == nil {
			for id, w := range watching {
				if !live[id] { // lost or gone
					w.cancel()
					delete(watching, id)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchNode forwards node n's events until its stream or ctx ends.
func (s *Service) watchNode(ctx context.Context, n *store.Node, out chan<- nodeapi.Event) {
	events, err := s.client(n).Watch(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("watch node", "node_id", n.ID, "error", err)
		}
		return
	}
	for ev := range events {
		if !s.ownEvent(ctx, n, ev) {
			continue
		}
		if ev.Type == nodeapi.EventExited || ev.Type == nodeapi.EventKilled {
			s.release(context.WithoutCancel(ctx), ev.SandboxID)
		}
		select {
		case out <- ev:
		case <-ctx.Done():
			return
		}
	}
}

// ownEvent reports whether node n may report ev: the sandbox is placed on
// n (its store row names n) and ev names its current execution. A node is
// not trusted beyond its own sandboxes (docs/security.md).
func (s *Service) ownEvent(ctx context.Context, n *store.Node, ev nodeapi.Event) bool {
	sb, err := s.st.GetSandbox(ctx, ev.SandboxID)
	switch {
	case errdefs.IsNotFound(err):
	case err != nil:
		// Not read now: the reconcile (the store against the nodes' lists)
		// settles what the event said.
		s.log.Warn("node event not checked: dropped", "node_id", n.ID, "sandbox_id", ev.SandboxID, "error", err)
		return false
	case sb.Spec.NodeID == n.ID && ev.ExecutionID != "" && ev.ExecutionID == sb.Spec.ExecutionID:
		return true
	}
	held := ""
	if sb != nil {
		held = sb.Spec.NodeID
	}
	s.log.Warn("node event of a sandbox or execution it does not hold: dropped", "node_id", n.ID, "sandbox_id", ev.SandboxID,
		"execution_id", ev.ExecutionID, "event", string(ev.Type), "held_by", held)
	s.m.foreignEvents.Inc()
	return false
}
