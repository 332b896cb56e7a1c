package lifecycle

import (
	"context"
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// TeamLimits are the bounds the lifecycle keeps per team past a create:
// a resume takes a concurrency slot as a create does, and a pause a
// paused slot. Zero means no bound.
type TeamLimits struct {
	MaxConcurrent int
	MaxPaused     int
}

// PausedLimitError is returned by Pause when the team keeps as many
// paused sandboxes as it may. It is an ErrExhausted.
type PausedLimitError struct{ Limit int }

func (e *PausedLimitError) Error() string {
	return fmt.Sprintf("you have reached the maximum number of paused sandboxes (%d); kill a paused sandbox or ask for a higher limit", e.Limit)
}

// Unwrap makes PausedLimitError an ErrExhausted.
func (e *PausedLimitError) Unwrap() error { return errdefs.ErrExhausted }

// PublicMessage is what a client is told: Error, which names only the
// team's own limit (errdefs.Public).
func (e *PausedLimitError) PublicMessage() string { return e.Error() }

// teamLimits asks Config.TeamLimits (none: no bounds).
func (m *Manager) teamLimits(ctx context.Context, teamID string) (TeamLimits, error) {
	if m.cfg.TeamLimits == nil {
		return TeamLimits{}, nil
	}
	l, err := m.cfg.TeamLimits(ctx, teamID)
	if err != nil {
		return TeamLimits{}, fmt.Errorf("team %q limits: %w", teamID, err)
	}
	return l, nil
}

// reserveResume takes a concurrency slot of sb's team for a resume, or
// fails with LimitError when the team is at its limit, counting the
// creates in progress without a row yet (admit). The slot counts against
// creates (reserve, admit) until release, when the resumed sandbox is
// running in the store (or the resume failed).
func (m *Manager) reserveResume(ctx context.Context, sb *store.Sandbox) (release func(), err error) {
	lim, err := m.teamLimits(ctx, sb.TeamID)
	if err != nil {
		return nil, err
	}
	if lim.MaxConcurrent <= 0 {
		return func() {}, nil
	}
	m.createMu.Lock()
	defer m.createMu.Unlock()
	n, err := m.st.CountSandboxes(ctx, sb.TeamID, store.ActiveStates...)
	if err != nil {
		return nil, err
	}
	if n+m.resuming[sb.TeamID]+m.admitted[sb.TeamID] >= lim.MaxConcurrent {
		return nil, &LimitError{Limit: lim.MaxConcurrent}
	}
	m.resuming[sb.TeamID]++
	return func() {
		m.createMu.Lock()
		defer m.createMu.Unlock()
		if m.resuming[sb.TeamID]--; m.resuming[sb.TeamID] <= 0 {
			delete(m.resuming, sb.TeamID)
		}
	}, nil
}

// checkPaused fails with PausedLimitError when sb's team keeps as many
// paused sandboxes as it may. The caller holds createMu.
func (m *Manager) checkPaused(ctx context.Context, sb *store.Sandbox) error {
	lim, err := m.teamLimits(ctx, sb.TeamID)
	if err != nil || lim.MaxPaused <= 0 {
		return err
	}
	n, err := m.st.CountSandboxes(ctx, sb.TeamID, sandbox.StatePausing, sandbox.StatePaused)
	if err != nil {
		return err
	}
	if n >= lim.MaxPaused {
		return &PausedLimitError{Limit: lim.MaxPaused}
	}
	return nil
}
