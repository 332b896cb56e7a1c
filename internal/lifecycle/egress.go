package lifecycle

import (
	"context"
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// EgressLog returns what a team's sandbox tried to reach through its
// node's egress proxy (nodeapi.EgressLogger); ErrNotFound for a sandbox
// the team does not have, ErrUnsupported when its node keeps no log.
func (m *Manager) EgressLog(ctx context.Context, teamID, id string) ([]nodeapi.EgressEntry, error) {
	if _, err := m.Get(ctx, teamID, id); err != nil {
		return nil, err
	}
	el, ok := m.node.(nodeapi.EgressLogger)
	if !ok {
		return nil, fmt.Errorf("sandbox %q egress log: %w", id, errdefs.ErrUnsupported)
	}
	return el.EgressLog(ctx, id)
}
