package lifecycle

import (
	"context"

	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// Health asks the sandbox's node for the watchdog's view of sb
// (docs/lifecycle.md §5). A sandbox that is not running, or a node that
// does not answer, is unknown: health is an observation, never an error of
// the caller's request.
func (m *Manager) Health(ctx context.Context, sb *store.Sandbox) nodeapi.Health {
	if sb == nil || sb.State != sandbox.StateRunning {
		return nodeapi.HealthUnknown
	}
	v, err := m.node.Get(ctx, sb.ID)
	if err != nil || v.Health == "" {
		m.log.Debug("sandbox health from node", "sandbox_id", sb.ID, "error", err)
		return nodeapi.HealthUnknown
	}
	return v.Health
}
