package serve

import (
	"context"
	"log/slog"
	"time"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodereg"
)

// LocalNodeID is the node ID of warren serve's in-process node agent (the
// lifecycle's default NodeID, recorded on its sandboxes).
const LocalNodeID = "local"

// addLocalNode lists warren serve's one in-process node in the node
// registry (GET /admin/nodes): registered at Start, then refreshed every
// heartbeat interval until Close. It has no RPC or proxy address; its
// boot ID is new at every start.
func addLocalNode(sys *app.System, reg *nodereg.Registry, svc nodeapi.Service, log *slog.Logger) {
	capacity, err := nodereg.HostCapacity()
	if err != nil {
		log.Warn("local node capacity: memory unknown", "error", err)
	}
	base := nodereg.Status{ID: LocalNodeID, BootID: nodereg.NewBootID(), Version: nodereg.BinaryVersion(), Capacity: capacity}
	beat := func(ctx context.Context) {
		st, err := nodereg.Collect(ctx, svc, base)
		var r *nodereg.Reply
		if err == nil {
			r, err = reg.Beat(ctx, st)
		}
		if err == nil {
			err = nodereg.Apply(ctx, svc, r)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("local node heartbeat", "error", err)
		}
	}
	sys.OnStart("local node", func(ctx context.Context) error { beat(ctx); return nil })
	sys.Go("local node heartbeats", func(ctx context.Context) error {
		t := time.NewTicker(nodereg.DefaultHeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				beat(ctx)
			}
		}
	})
}
