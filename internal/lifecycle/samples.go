package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Metrics returns a team's sandbox's sampled resource use in [start, end]
// (zero bounds are open), oldest first. A node that keeps samples
// (nodeapi.MetricsSource) answers from them, for running and paused
// sandboxes; another node gives the current reading of a running sandbox.
// A sandbox the node no longer holds has none.
func (m *Manager) Metrics(ctx context.Context, teamID, id string, start, end time.Time) ([]nodeapi.Stats, error) {
	sb, err := m.Get(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	if src, ok := m.node.(nodeapi.MetricsSource); ok {
		out, err := src.Metrics(ctx, id, start, end)
		switch {
		case errdefs.IsNotFound(err):
			return []nodeapi.Stats{}, nil
		case !errors.Is(err, errdefs.ErrUnsupported):
			return out, err
		}
		// A remote node that keeps no samples: its current reading.
	}
	if sb.State != sandbox.StateRunning {
		return []nodeapi.Stats{}, nil
	}
	st, err := m.node.Stats(ctx, id)
	if err != nil {
		return nil, err
	}
	if (!start.IsZero() && st.At.Before(start)) || (!end.IsZero() && st.At.After(end)) {
		return []nodeapi.Stats{}, nil
	}
	return []nodeapi.Stats{*st}, nil
}

// LatestMetric returns a team's running sandbox's latest sample (nil when
// it has none yet or is not running).
func (m *Manager) LatestMetric(ctx context.Context, teamID, id string) (*nodeapi.Stats, error) {
	sb, err := m.Get(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	if sb.State != sandbox.StateRunning {
		return nil, nil
	}
	if src, ok := m.node.(nodeapi.MetricsSource); ok {
		out, err := src.Metrics(ctx, id, time.Time{}, time.Time{})
		if err == nil && len(out) > 0 {
			return &out[len(out)-1], nil
		}
	}
	return m.node.Stats(ctx, id)
}
