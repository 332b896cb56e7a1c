package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	nodevolumes "github.com/warren-sandbox/warren/internal/node/volumes"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/volumes"
)

// volumeReconcileInterval is how often the control plane finishes the
// volumes a crash left half made or half deleted (internal/volumes).
const volumeReconcileInterval = time.Minute

// localVolumeNodes are the volumes' nodes of `warren serve`: its one
// in-process node.
type localVolumeNodes struct {
	id string
	vm *nodevolumes.Manager
}

var _ volumes.Nodes = localVolumeNodes{}

// VolumeCandidates implements volumes.Nodes.
func (l localVolumeNodes) VolumeCandidates(context.Context, int64) ([]string, error) {
	return []string{l.id}, nil
}

// VolumeNode implements volumes.Nodes.
func (l localVolumeNodes) VolumeNode(_ context.Context, id string) (nodeapi.VolumeService, error) {
	if id != l.id {
		return nil, fmt.Errorf("node %q: %w", id, errdefs.ErrNotFound)
	}
	return l.vm, nil
}

// newVolumes is the control plane's volume service over nodes (nil
// without them: the fake driver keeps no volumes).
func newVolumes(st *store.SQL, nodes volumes.Nodes, lc *lifecycle.Manager, log *slog.Logger) (*volumes.Service, error) {
	if nodes == nil {
		return nil, nil
	}
	return volumes.New(volumes.Config{Store: st, Nodes: nodes, Lifecycle: lc, Logger: log.With("component", "volumes")})
}

// runVolumes reconciles the volumes until ctx ends; the returned func
// waits for it.
func runVolumes(ctx context.Context, vs *volumes.Service) func() {
	done := make(chan struct{})
	if vs == nil {
		close(done)
	} else {
		go func() { defer close(done); vs.Run(ctx, volumeReconcileInterval) }()
	}
	return func() { <-done }
}
