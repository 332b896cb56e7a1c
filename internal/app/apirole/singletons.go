package apirole

import (
	"context"
	"log/slog"
	"time"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/leader"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/nodereg"
)

// The singletons of `warren api`, run by the replica that holds the
// leader lease (internal/leader): node liveness, and the reconcile with the
// nodes when one comes back, when a term starts, and every
// apiReconcileEvery (which re-arms on the leader the deadlines that a
// replica that went away alone held). The lifecycle's evictor runs on
// every replica: a replica arms the deadlines of the sandboxes it creates,
// resumes or extends, and when two fire for one expiry the kill's row lock
// records one (lifecycle's TestReplicasKillAnExpiryOnce).
const (
	apiReconcileEvery = time.Minute
	// apiStartGrace is how long a reconcile leaves a sandbox in state
	// starting to the replica that starts it (lifecycle.Config.StartGrace).
	apiStartGrace = 10 * time.Minute
)

// addSingletons adds to sys the singletons, run on el's leader terms,
// and returns the node-back hook for nodes (which may hear of a node on
// any replica: it pokes the leader through the lease row).
func addSingletons(sys *app.System, el *leader.Elector, nodes *nodereg.Registry, liveness nodereg.LivenessConfig,
	lc *lifecycle.Manager) (onNodeBack func(string)) {
	log := sys.Logger
	// A term's liveness gives every node a full window from its start,
	// and a replica that stopped leading while it could not notice (its
	// process frozen past the lease) checks nothing.
	liveness.Leading = el.IsLeader
	sys.Go("node liveness", func(ctx context.Context) error {
		el.While(ctx, func(ctx context.Context) { nodes.RunLiveness(ctx, liveness) })
		return nil
	})
	sys.Go("leader reconcile", func(ctx context.Context) error {
		el.While(ctx, func(ctx context.Context) { reconcileAsLeader(ctx, lc, el.Pokes(), log) })
		return nil
	})
	back := make(chan struct{}, 1)
	sys.Go("node back", func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-back:
			}
			if err := el.Poke(ctx); err != nil && ctx.Err() == nil {
				log.Warn("ask the leader to reconcile after a node came back", "error", err)
			}
		}
	})
	return func(nodeID string) {
		log.Info("node came back: asking the leader to reconcile", "node_id", nodeID)
		select {
		case back <- struct{}{}:
		default:
		}
	}
}

// reconcileAsLeader reconciles the lifecycle with the nodes at each poke
// (a term start, a node back on any replica) and every apiReconcileEvery,
// until ctx (the leader's term) ends. One run at a time; pokes during a
// run make one more.
func reconcileAsLeader(ctx context.Context, lc *lifecycle.Manager, pokes <-chan struct{}, log *slog.Logger) {
	t := time.NewTicker(apiReconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pokes:
		case <-t.C:
		}
		if err := lc.Reconcile(ctx); err != nil && ctx.Err() == nil {
			log.Warn("leader reconcile", "error", err)
		}
	}
}
