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
	h, err := a.lookup(id)
	if err != nil {
		return err
	}
	return h.kill(ctx, executionID, reason)
}

// kill destroys h for the control plane, if it still runs execution
// executionID ("" matches any).
func (h *handle) kill(ctx context.Context, executionID string, reason sandbox.KillReason) error {
	a, id := h.a, h.id
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	st := h.get()
	if st.gone {
		return a.goneErr(id)
	}
	execID := st.rec.ExecutionID
	if executionID != "" && executionID != execID {
		a.log.Info("kill for an older execution ignored", "sandbox_id", id, "execution_id", executionID,
			"current_execution_id", execID, "kill_reason", reason.String())
		return fmt.Errorf("sandbox %q: kill for execution %q, which is no longer current: %w", id, executionID, errdefs.ErrConflict)
	}
	log := a.log.With("sandbox_id", id, "execution_id", execID, "kill_reason", reason.String())
	log.Info("killing sandbox", "state", st.rec.State)
	h.destroy(ctx, log)
	log.Info("sandbox killed")
	a.countKill(reason)
	a.events.emit(nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: id, ExecutionID: execID, Reason: reason, At: a.clock.Now()})
	return nil
}

// discard destroys h, the agent's own sandbox (a pool member, a template
// snapshot's), unless it is gone already; log carries the kill reason.
func (h *handle) discard(ctx context.Context, log *slog.Logger) {
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	if h.isGone() {
		return
	}
	h.destroy(ctx, log)
}

// ownKill carries out a kill the agent decided on its own (kills.go): ev
// (its type, reason and time) is recorded first, then h is destroyed, and
// the kill is counted and, unless h is internal, delivered to watchers.
// The caller holds h.op.
func (h *handle) ownKill(ctx context.Context, ev nodeapi.Event, internal bool, log *slog.Logger) {
	a := h.a
	if !internal {
		a.journalKill(ev, log)
	}
	h.destroy(ctx, log)
	if internal {
		return
	}
	a.countKill(ev.Reason)
	a.events.emit(ev)
}

// awaitExit waits for the init of h's epoch to exit (watchExit) and
// handles the exit, unless ctx ended first.
func (h *handle) awaitExit(ctx context.Context, epoch int64) {
	exit, err := h.a.drv.Wait(ctx, h.id)
	if ctx.Err() != nil {
		return
	}
	if err != nil && !errdefs.IsNotFound(err) {
		h.a.log.Warn("wait for sandbox init", "sandbox_id", h.id, "error", err)
		return
	}
	h.handleExit(epoch, exit.Code, exit.OOM)
}

// handleExit tears down h, whose init ended by itself, unless the agent
// stopped it (kill, pause) or it moved to another epoch meanwhile.
func (h *handle) handleExit(epoch int64, code int, oom bool) {
	a := h.a
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	st, ok := h.runningIn(epoch)
	if !ok {
		return
	}
	id, execID := h.id, st.rec.ExecutionID
	ctx := a.ctx
	at := a.clock.Now()
	reason := exitReason(ctx, st.cg, oom)
	log := a.log.With("sandbox_id", id, "execution_id", execID, "kill_reason", reason.String())
	log.Info("sandbox init exited by itself", "exit_code", code)
	h.ownKill(context.WithoutCancel(ctx), nodeapi.Event{Type: nodeapi.EventExited, SandboxID: id, ExecutionID: execID, Reason: reason, At: at}, st.internal, log)
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

// armBackstopLocked (re)arms the TTL backstop of running sandbox h at its
// end time plus the grace, or later if a refused pause pushed it forward.
// h.mu is held.
func (h *handle) armBackstopLocked() {
	a := h.a
	if h.backstop != nil {
		h.backstop.Stop()
		h.backstop = nil
	}
	h.backstopAt = time.Time{}
	if h.rec.EndAt.IsZero() {
		return
	}
	at := h.rec.EndAt.Add(a.cfg.BackstopGrace)
	if h.backstopFloor.After(at) {
		at = h.backstopFloor
	}
	h.backstopAt = at
	epoch := h.rec.Epoch
	h.backstop = a.clock.AfterFunc(at.Sub(a.clock.Now()), func() {
		a.tracked(func() { h.fireBackstop(epoch) })
	})
}

// pushBackstopLocked moves h's backstop to at least now plus the grace:
// the control plane is still trying to pause it (docs/lifecycle.md §3).
// h.mu is held.
func (h *handle) pushBackstopLocked() {
	floor := h.a.clock.Now().Add(h.a.cfg.BackstopGrace)
	if floor.After(h.backstopFloor) {
		h.backstopFloor = floor
	}
	if h.rec.State == sandbox.StateRunning {
		h.armBackstopLocked()
	}
}

// BackstopDeadline reports when sandbox id's TTL backstop fires (zero if
// it is not armed).
func (a *Agent) BackstopDeadline(id string) (time.Time, error) {
	h, err := a.lookup(id)
	if err != nil {
		return time.Time{}, err
	}
	return h.backstopDeadline(), nil
}

// backstopDue returns h's state when its backstop of epoch is due now.
func (h *handle) backstopDue(epoch int64) (sbxState, time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone || h.rec.Epoch != epoch || h.rec.State != sandbox.StateRunning ||
		h.backstopAt.IsZero() || h.a.clock.Now().Before(h.backstopAt) {
		// Stale: the sandbox moved on or its end time moved later.
		return sbxState{}, time.Time{}, false
	}
	return sbxState{rec: h.rec, cg: h.cg, internal: h.internal}, h.backstopAt, true
}

// fireBackstop stops h with reason ttl_backstop: the control plane did not
// act by its end time plus the grace.
func (h *handle) fireBackstop(epoch int64) {
	a := h.a
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	st, at, ok := h.backstopDue(epoch)
	if !ok {
		return
	}
	id, execID, endAt := h.id, st.rec.ExecutionID, st.rec.EndAt
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
	h.ownKill(ctx, nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: id, ExecutionID: execID, Reason: reason, At: killedAt}, st.internal, log)
	log.Info("sandbox killed")
}
