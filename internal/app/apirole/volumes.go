package apirole

import (
	"log/slog"
	"time"

	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/volumes"
)

// volumeReconcileInterval is how often the control plane finishes the
// volumes a crash left half made or half deleted (internal/volumes).
const volumeReconcileInterval = time.Minute

// newVolumes is the control plane's volume service over nodes (nil
// without them: the fake driver keeps no volumes).
func newVolumes(st *store.SQL, nodes volumes.Nodes, lc *lifecycle.Manager, log *slog.Logger) (*volumes.Service, error) {
	if nodes == nil {
		return nil, nil
	}
	return volumes.New(volumes.Config{Store: st, Nodes: nodes, Lifecycle: lc, Logger: log.With("component", "volumes")})
}
