package serve

import (
	"context"
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/volumes"
)

// localVolumeNodes are the volumes' nodes of `warren serve`: its one
// in-process node.
type localVolumeNodes struct {
	id string
	vm nodeapi.VolumeService
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
