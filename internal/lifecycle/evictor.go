package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// deadline is when the evictor looks at a sandbox, and which execution
// of it the look is for: a deadline armed for one execution never acts on
// a resumed successor.
type deadline struct {
	at   time.Time
	exec string
}

// arm schedules the evictor to look at execution exec of sandbox id at t.
func (m *Manager) arm(id, exec string, t time.Time) {
	m.evMu.Lock()
	m.deadlines[id] = deadline{at: t, exec: exec}
	m.evMu.Unlock()
	m.poke()
}

func (m *Manager) disarm(id string) {
	m.evMu.Lock()
	delete(m.deadlines, id)
	m.evMu.Unlock()
	m.poke()
}

func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Deadline returns the time the evictor will next look at sandbox id.
func (m *Manager) Deadline(id string) (time.Time, bool) {
	m.evMu.Lock()
	defer m.evMu.Unlock()
	d, ok := m.deadlines[id]
	return d.at, ok
}

// Run reconciles the store with the node, re-arms every deadline from the
// store, then runs the evictor and the node event watcher until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	events, err := m.node.Watch(ctx)
	if err != nil {
		return fmt.Errorf("watch node: %w", err)
	}
	if err := m.Reconcile(ctx); err != nil {
		return err
	}
	m.wg.Go(func() { m.watch(ctx, events) })
	m.wg.Go(func() { m.watchChanges(ctx) })
	defer m.wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		var next time.Time
		due := map[string]string{}
		m.evMu.Lock()
		for id, d := range m.deadlines {
			if !d.at.After(now) {
				due[id] = d.exec
				delete(m.deadlines, id)
			} else if next.IsZero() || d.at.Before(next) {
				next = d.at
			}
		}
		m.evMu.Unlock()
		for id, exec := range due {
			m.wg.Go(func() { m.expire(ctx, id, exec) })
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(now)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-m.wake:
		case <-timer.C:
		}
	}
}

// expire handles a deadline of execution exec that came due: kill with
// reason timeout, or pause when the sandbox asked for auto-pause. A
// deadline of an older execution is dropped.
func (m *Manager) expire(ctx context.Context, id, exec string) {
	defer m.lock(id)()
	sb, err := m.st.GetSandbox(ctx, id)
	if err != nil {
		if !errdefs.IsNotFound(err) {
			m.log.Warn("evictor read", "sandbox_id", id, "error", err)
			m.arm(id, exec, time.Now().Add(m.cfg.PauseRetry))
		}
		return
	}
	if sb.State != sandbox.StateRunning {
		return
	}
	if exec != "" && sb.Spec.ExecutionID != exec {
		m.log.Debug("evictor: deadline of an older execution dropped", "sandbox_id", id, "execution_id", exec)
		return
	}
	now := time.Now()
	if sb.EndAt.After(now) {
		m.arm(id, exec, sb.EndAt) // moved since it was armed
		return
	}
	if !sb.Spec.AutoPause {
		if err := m.killLocked(ctx, id, exec, sandbox.KillTimeout); err != nil && !errdefs.IsNotFound(err) {
			m.log.Warn("evictor kill failed, will retry", "sandbox_id", id, "kill_reason", sandbox.KillTimeout.String(), "error", err)
			m.arm(id, exec, now.Add(m.cfg.PauseRetry))
		}
		return
	}
	memory := sb.Spec.AutoPauseMemory
	if !sb.Spec.PauseRefusedAt.IsZero() && now.Sub(sb.Spec.PauseRefusedAt) >= m.cfg.PauseOverstay {
		memory = false // docs/lifecycle.md §3: degrade to a filesystem-only pause
	}
	err = m.pauseLocked(ctx, sb, memory)
	var full *PausedLimitError
	switch {
	case err == nil:
	case errors.As(err, &full):
		// The team keeps as many paused sandboxes as it may: the timeout
		// ends this one as if it had no auto-pause.
		m.log.Info("auto-pause over the team's paused limit, killing", "sandbox_id", id, "kill_reason", sandbox.KillTimeout.String(), "limit", full.Limit)
		if err := m.killLocked(ctx, id, exec, sandbox.KillTimeout); err != nil && !errdefs.IsNotFound(err) {
			m.log.Warn("evictor kill failed, will retry", "sandbox_id", id, "kill_reason", sandbox.KillTimeout.String(), "error", err)
			m.arm(id, exec, now.Add(m.cfg.PauseRetry))
		}
	case errdefs.IsExhausted(err):
		_, uerr := m.st.TransitionSandbox(ctx, id, func(s *store.Sandbox) (*store.Event, error) {
			if s.Spec.PauseRefusedAt.IsZero() {
				s.Spec.PauseRefusedAt = now.UTC()
			}
			e := newEvent(s, store.EventPauseRefused)
			e.Message = err.Error()
			return e, nil
		})
		if uerr != nil {
			m.log.Warn("record refused pause", "sandbox_id", id, "error", uerr)
		}
		m.log.Info("auto-pause refused, will retry", "sandbox_id", id, "execution_id", exec, "retry_in", m.cfg.PauseRetry, "error", err)
		m.arm(id, exec, now.Add(m.cfg.PauseRetry))
	case errdefs.IsNotFound(err):
	default:
		m.log.Warn("auto-pause failed, killing", "sandbox_id", id, "kill_reason", sandbox.KillTimeout.String(), "error", err)
		if err := m.killLocked(ctx, id, exec, sandbox.KillTimeout); err != nil && !errdefs.IsNotFound(err) {
			m.log.Warn("evictor kill failed, will retry", "sandbox_id", id, "kill_reason", sandbox.KillTimeout.String(), "error", err)
			m.arm(id, exec, now.Add(m.cfg.PauseRetry))
		}
	}
}

// watch turns the node's own events (exit, oom, backstop) into store
// transitions.
func (m *Manager) watch(ctx context.Context, events <-chan nodeapi.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			m.handle(ctx, ev)
		}
	}
}

func (m *Manager) handle(ctx context.Context, ev nodeapi.Event) {
	switch ev.Type {
	case nodeapi.EventExited, nodeapi.EventKilled:
	default:
		return
	}
	reason := ev.Reason
	if !reason.Known() {
		reason = "" // a reason no node gives: unknown
	}
	if reason == "" && ev.Type == nodeapi.EventExited {
		reason = sandbox.KillExited
	}
	defer m.lock(ev.SandboxID)()
	if m.killPending("", ev.SandboxID, ev.ExecutionID, reason) {
		m.log.Info("sandbox ended on its node while starting", "sandbox_id", ev.SandboxID, "kill_reason", reason.String())
		return
	}
	sb, err := m.markKilledAt(ctx, ev.SandboxID, reason, ev.ExecutionID, ev.At)
	switch {
	case err == nil:
		m.log.Info("sandbox ended on its node", "sandbox_id", ev.SandboxID, "team_id", sb.TeamID, "kill_reason", reason.String())
	case errdefs.IsNotFound(err), errdefs.IsConflict(err):
		// Already killed, or an event of an older execution: stale.
		m.log.Debug("stale node event dropped", "sandbox_id", ev.SandboxID, "execution_id", ev.ExecutionID, "kill_reason", reason.String())
	default:
		m.log.Warn("record node event", "sandbox_id", ev.SandboxID, "error", err)
	}
}
