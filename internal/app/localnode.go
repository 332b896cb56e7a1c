package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodereg"
)

// LocalNodeID is the node ID of warren serve's in-process node agent (the
// lifecycle's default NodeID, recorded on its sandboxes).
const LocalNodeID = "local"

// startLocalNode lists warren serve's one in-process node in the node
// registry (GET /admin/nodes): registered now, then refreshed every
// heartbeat interval until ctx ends. It has no RPC or proxy address; its
// boot ID is new at every start. wait waits for the loop to end.
func startLocalNode(ctx context.Context, reg *nodereg.Registry, svc nodeapi.Service, log *slog.Logger) (wait func()) {
	capacity, err := nodereg.HostCapacity()
	if err != nil {
		log.Warn("local node capacity: memory unknown", "error", err)
	}
	base := nodereg.Status{ID: LocalNodeID, BootID: nodereg.NewBootID(), Version: nodereg.BinaryVersion(), Capacity: capacity}
	beat := func() {
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
	beat()
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(nodereg.DefaultHeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				beat()
			}
		}
	})
	return wg.Wait
}
