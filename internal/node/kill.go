package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// exitSettle is how long a firing backstop waits for an exit that is ready
// at the same moment: the exit wins (docs/lifecycle.md §2).
const exitSettle = 100 * time.Millisecond

// Kill implements Service. The reason is on every log line of the kill path
// and on the killed event.
func (a *Agent) Kill(ctx context.Context, id string, reason sandbox.KillReason) error {
	return a.KillExecution(ctx, id, "", reason)
}

var _ nodeapi.ExecutionKiller = (*Agent)(nil)

// KillExecution implements ExecutionKiller: Kill, only if the sandbox still
// runs execution executionID ("" matches any).
func (a *Agent) KillExecution(ctx context.Context, id, executionID string, reason sandbox.KillReason) error {
	s, err := a.lookup(id)
	if err != nil {
		return err
	}
	s.op.Lock()
	defer s.op.Unlock()
	a.mu.Lock()
	gone, execID, state := s.gone, s.rec.ExecutionID, s.rec.State
	a.mu.Unlock()
	if gone {
		return a.goneErr(id)
	}
	if executionID != "" && executionID != execID {
		a.log.Info("kill for an older execution ignored", "sandbox_id", id, "execution_id", executionID,
			"current_execution_id", execID, "kill_reason", reason.String())
		return fmt.Errorf("sandbox %q: kill for execution %q, which is no longer current: %w", id, executionID, errdefs.ErrConflict)
	}
	log := a.log.With("sandbox_id", id, "execution_id", execID, "kill_reason", reason.String())
	log.Info("killing sandbox", "state", state)
	a.destroy(ctx, s, log)
	log.Info("sandbox killed")
	a.countKill(reason)
	a.emit(nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: id, ExecutionID: execID, Reason: reason, At: a.clock.Now()})
	return nil
}

// ownKill carries out a kill the agent decided on its own (kills.go): ev
// (its type, reason and time) is recorded first, then s is destroyed, and
// the kill is counted and, unless s is internal, delivered to watchers.
// The caller holds s.op.
func (a *Agent) ownKill(ctx context.Context, s *sbx, ev nodeapi.Event, internal bool, log *slog.Logger) {
	if !internal {
		a.journalKill(ev, log)
	}
	a.destroy(ctx, s, log)
	if internal {
		return
	}
	a.countKill(ev.Reason)
	a.emit(ev)
}

// startWatcherLocked starts the goroutine that waits for s's init to exit.
// a.mu is held.
func (a *Agent) startWatcherLocked(s *sbx) {
	if s.stopWatch != nil {
		s.stopWatch()
	}
	ctx, cancel := context.WithCancel(a.ctx)
	s.stopWatch = cancel
	id, epoch := s.rec.ID, s.rec.Epoch
	a.wg.Go(func() {
		exit, err := a.drv.Wait(ctx, id)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errdefs.IsNotFound(err) {
			a.log.Warn("wait for sandbox init", "sandbox_id", id, "error", err)
			return
		}
		a.handleExit(s, epoch, exit.Code, exit.OOM)
	})
}

// handleExit tears down a sandbox whose init ended by itself, unless the
// agent stopped it (kill, pause) or it moved to another epoch meanwhile.
func (a *Agent) handleExit(s *sbx, epoch int64, code int, oom bool) {
	s.op.Lock()
	defer s.op.Unlock()
	a.mu.Lock()
	if s.gone || s.rec.Epoch != epoch || s.rec.State != sandbox.StateRunning {
		a.mu.Unlock()
		return
	}
	id, execID, cg, internal := s.rec.ID, s.rec.ExecutionID, s.cg, s.internal
	a.mu.Unlock()
	ctx := a.ctx
	at := a.clock.Now()
	reason := exitReason(ctx, cg, oom)
	log := a.log.With("sandbox_id", id, "execution_id", execID, "kill_reason", reason.String())
	log.Info("sandbox init exited by itself", "exit_code", code)
	a.ownKill(context.WithoutCancel(ctx), s, nodeapi.Event{Type: nodeapi.EventExited, SandboxID: id, ExecutionID: execID, Reason: reason, At: at}, internal, log)
}

// exitReason says why a sandbox whose init ended by itself stopped: a
// limit of its host cgroup that fired (oom when the driver saw an OOM
// kill or the memory limit killed a process, pids_limit when the pids
// limit refused a fork: under gVisor either ends the whole sandbox), or
// exited. cg may be nil.
func exitReason(ctx context.Context, cg cgroup.Cgroup, oom bool) sandbox.KillReason {
	if !oom && cg != nil {
		oom, _ = cg.OOMKilled(ctx)
	}
	if oom {
		return sandbox.KillOOM
	}
	if cg != nil {
		if hit, _ := cg.PidsLimitHit(ctx); hit {
			return sandbox.KillPidsLimit
		}
	}
	return sandbox.KillExited
}

// armBackstopLocked (re)arms the TTL backstop of running sandbox s at its
// end time plus the grace, or later if a refused pause pushed it forward.
// a.mu is held.
func (a *Agent) armBackstopLocked(s *sbx) {
	if s.backstop != nil {
		s.backstop.Stop()
		s.backstop = nil
	}
	s.backstopAt = time.Time{}
	if s.rec.EndAt.IsZero() {
		return
	}
	at := s.rec.EndAt.Add(a.cfg.BackstopGrace)
	if s.backstopFloor.After(at) {
		at = s.backstopFloor
	}
	s.backstopAt = at
	epoch := s.rec.Epoch
	s.backstop = a.clock.AfterFunc(at.Sub(a.clock.Now()), func() {
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return
		}
		a.wg.Add(1)
		a.mu.Unlock()
		defer a.wg.Done()
		a.fireBackstop(s, epoch)
	})
}

// pushBackstopLocked moves s's backstop to at least now plus the grace:
// the control plane is still trying to pause it (docs/lifecycle.md §3).
func (a *Agent) pushBackstopLocked(s *sbx) {
	floor := a.clock.Now().Add(a.cfg.BackstopGrace)
	if floor.After(s.backstopFloor) {
		s.backstopFloor = floor
	}
	if s.rec.State == sandbox.StateRunning {
		a.armBackstopLocked(s)
	}
}

// BackstopDeadline reports when sandbox id's TTL backstop fires (zero if
// it is not armed).
func (a *Agent) BackstopDeadline(id string) (time.Time, error) {
	s, err := a.lookup(id)
	if err != nil {
		return time.Time{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return s.backstopAt, nil
}

// fireBackstop stops s with reason ttl_backstop: the control plane did not
// act by its end time plus the grace.
func (a *Agent) fireBackstop(s *sbx, epoch int64) {
	s.op.Lock()
	defer s.op.Unlock()
	a.mu.Lock()
	if s.gone || s.rec.Epoch != epoch || s.rec.State != sandbox.StateRunning ||
		s.backstopAt.IsZero() || a.clock.Now().Before(s.backstopAt) {
		// Stale: the sandbox moved on or its end time moved later.
		a.mu.Unlock()
		return
	}
	id, execID, endAt, at, internal := s.rec.ID, s.rec.ExecutionID, s.rec.EndAt, s.backstopAt, s.internal
	a.mu.Unlock()
	ctx := a.ctx
	// An exit that is ready at the same moment wins: the exit watcher
	// records it once this returns.
	wctx, cancel := context.WithTimeout(ctx, exitSettle)
	_, err := a.drv.Wait(wctx, id)
	cancel()
	if err == nil || errdefs.IsNotFound(err) {
		a.log.Debug("sandbox exited as its TTL backstop fired; the exit wins", "sandbox_id", id)
		return
	}
	if ctx.Err() != nil {
		return
	}
	reason := sandbox.KillTTLBackstop
	log := a.log.With("sandbox_id", id, "execution_id", execID, "kill_reason", reason.String())
	killedAt := a.clock.Now()
	log.Info("TTL backstop: the control plane did not stop the sandbox by its end time plus grace",
		"end_at", endAt, "grace", a.cfg.BackstopGrace, "deadline", at)
	a.ownKill(ctx, s, nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: id, ExecutionID: execID, Reason: reason, At: killedAt}, internal, log)
	log.Info("sandbox killed")
}
