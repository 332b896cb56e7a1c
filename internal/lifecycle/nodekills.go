package lifecycle

import (
	"context"
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// A node's own kills (nodeapi.KillReporter): the node stopped a sandbox
// without being asked (backstop, exit, limits), perhaps while the control
// plane was away. Three ways bring such a kill to the store, and each
// records it as the node made it, with its reason and time: the node's
// event (watch), its report in a heartbeat (RecordNodeKill), and its
// answer about the sandbox (a nodeapi.KilledError) to a call the control
// plane makes before either reached it (nodeEnded: the evictor's timeout
// kill after an outage, a reconcile, a user's kill, a pause or resume).

// nodeReason is the reason recorded for a node's own kill: one a node
// gives, else unknown.
func nodeReason(r sandbox.KillReason) sandbox.KillReason {
	if nodeapi.IsNodeKillReason(r) {
		return r
	}
	return ""
}

// nodeEnded records the end of sandbox id, which its node answered it
// does not hold (nodeErr, a not-found): the node's own kill when the
// answer tells one (its reason and time, in the execution it names),
// else reason, now, for executionID. It returns the reason recorded.
func (m *Manager) nodeEnded(ctx context.Context, id string, nodeErr error, reason sandbox.KillReason, executionID string) (*store.Sandbox, sandbox.KillReason, error) {
	if kill, ok := nodeapi.NodeKill(nodeErr); ok && kill.SandboxID == id && kill.ExecutionID != "" {
		r := nodeReason(kill.Reason)
		sb, err := m.markKilledAt(ctx, id, r, kill.ExecutionID, kill.At)
		if !errdefs.IsConflict(err) {
			return sb, r, err
		}
		// A kill of an older execution: the current one is gone unexplained.
	}
	sb, err := m.markKilled(ctx, id, reason, executionID)
	return sb, reason, err
}

// RecordNodeKill records a kill that node nodeID reports it made on its
// own (its heartbeat carries them, internal/nodereg): for a sandbox placed
// on that node, in the execution the report names, with the node's reason
// (one a node gives, else unknown) and the time of the kill. A report of
// anything else (no such sandbox, one on another node, another execution,
// a sandbox killed already) changes nothing and is no error: the node may
// forget it. An error means the report could not be recorded now; the
// node reports it again.
func (m *Manager) RecordNodeKill(ctx context.Context, nodeID string, ev nodeapi.Event) error {
	log := m.log.With("sandbox_id", ev.SandboxID, "node_id", nodeID, "execution_id", ev.ExecutionID)
	if ev.ExecutionID == "" || !sandbox.ValidID(ev.SandboxID) {
		log.Warn("node's report of a kill without a sandbox or execution dropped", "kill_reason", ev.Reason.String())
		return nil
	}
	reason := nodeReason(ev.Reason)
	log = log.With("kill_reason", reason.String())
	defer m.lock(ev.SandboxID)()
	sb, err := m.st.GetSandbox(ctx, ev.SandboxID)
	switch {
	case errdefs.IsNotFound(err):
		log.Debug("node's report of a kill of a sandbox the store does not know dropped")
		return nil
	case err != nil:
		return fmt.Errorf("node %q kill report of sandbox %q: %w", nodeID, ev.SandboxID, err)
	case sb.State == sandbox.StateKilled:
		return nil
	}
	on := sb.Spec.NodeID
	if on == "" && !m.cfg.AllNodes {
		on = m.cfg.NodeID
	}
	if on != nodeID {
		log.Warn("node's report of a kill of a sandbox placed on another node dropped", "placed_on", on)
		return nil
	}
	if sb.Spec.ExecutionID != ev.ExecutionID {
		log.Debug("node's report of a kill of an older execution dropped", "current_execution_id", sb.Spec.ExecutionID)
		return nil
	}
	if m.killPending("", ev.SandboxID, ev.ExecutionID, reason) {
		log.Info("sandbox killed by its node while starting")
		return nil
	}
	if _, err := m.markKilledAt(ctx, ev.SandboxID, reason, ev.ExecutionID, ev.At); err != nil {
		if errdefs.IsNotFound(err) || errdefs.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("node %q kill report of sandbox %q: %w", nodeID, ev.SandboxID, err)
	}
	log.Info("sandbox killed by its node on its own, as it reported", "killed_at", ev.At)
	return nil
}
