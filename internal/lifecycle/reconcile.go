package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// beginStart records that a Create or Fork is about to insert sandboxes
// ids in state starting; endStart, that it is done with them (they run, or
// were killed or forgotten). Reconcile leaves the sandboxes in between to
// their creator.
func (m *Manager) beginStart(ids ...string) {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	for _, id := range ids {
		m.starting[id] = struct{}{}
	}
}

func (m *Manager) endStart(ids ...string) {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	for _, id := range ids {
		delete(m.starting, id)
	}
}

func (m *Manager) isStarting(id string) bool {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	_, ok := m.starting[id]
	return ok
}

// Reconcile makes the store and the node agree, as after a restart of
// either: sandboxes the node lost are marked killed (node_lost), sandboxes
// the node runs but the store does not know are killed (orphaned), and the
// deadline of every running sandbox is re-armed.
//
// The API may serve while it runs (warren serve starts both together), so
// the two listings can be out of date by the time they are compared. A
// sandbox that a Create or Fork of this Manager is still starting is left
// to its creator: its row says starting and the node may not list it yet.
// So is a row in state starting updated within StartGrace, which another
// Manager sharing the store (an API replica) may be starting.
// Every other disagreement is decided again under the sandbox's lock from
// a fresh read of the store and the node, so a kill, pause or resume that
// ran since the listings is not undone or counted twice.
func (m *Manager) Reconcile(ctx context.Context) error {
	// The node first: a sandbox it lists either had its store row
	// inserted before it was started (forks, and creates of an AllNodes
	// Manager) or is still being started by this Manager (isStarting,
	// checked after the store listing), so the store listing that follows
	// has it unless it has ended since. One that is neither was started
	// by a process that died before its write: an orphan (create.go).
	onNode, err := m.node.List(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: list node: %w", err)
	}
	live, err := m.st.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	byID := map[string]*nodeapi.Sandbox{}
	for _, ns := range onNode {
		byID[ns.ID] = ns
	}
	known := map[string]bool{}
	for _, sb := range live {
		if !m.cfg.AllNodes && sb.Spec.NodeID != "" && sb.Spec.NodeID != m.cfg.NodeID {
			continue
		}
		known[sb.ID] = true
		if m.isStarting(sb.ID) || sb.State == sandbox.StateStarting && m.cfg.StartGrace > 0 && time.Since(sb.UpdatedAt) < m.cfg.StartGrace {
			continue
		}
		if ns, ok := byID[sb.ID]; ok && nodeState(sb, ns) == sb.State {
			if sb.State == sandbox.StateRunning {
				m.arm(sb.ID, sb.Spec.ExecutionID, sb.EndAt)
			}
			continue
		}
		if err := m.reconcileSandbox(ctx, sb.ID); err != nil {
			return err
		}
	}
	for _, ns := range onNode {
		if known[ns.ID] || m.isStarting(ns.ID) {
			continue
		}
		m.reconcileOrphan(ctx, ns.ID)
	}
	return nil
}

// nodeState is the state the store should record for sandbox sb when its
// node reports it as ns: running or paused as the node says; while the node
// is between states, what the store says.
func nodeState(sb *store.Sandbox, ns *nodeapi.Sandbox) sandbox.State {
	if ns.State == sandbox.StateRunning || ns.State == sandbox.StatePaused {
		return ns.State
	}
	return sb.State
}

// reconcileSandbox settles a sandbox whose store row and node listing
// disagreed, under its lock and from a fresh read of both.
func (m *Manager) reconcileSandbox(ctx context.Context, id string) error {
	defer m.lock(id)()
	sb, err := m.st.GetSandbox(ctx, id)
	switch {
	case errdefs.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reconcile: %w", err)
	case sb.State == sandbox.StateKilled:
		return nil
	}
	ns, err := m.node.Get(ctx, id)
	if errdefs.IsNotFound(err) {
		if _, reason, err := m.nodeEnded(ctx, id, err, sandbox.KillNodeLost, ""); err == nil {
			m.log.Warn("sandbox gone from its node", "sandbox_id", id, "kill_reason", reason.String())
		}
		return nil
	}
	if err != nil {
		// Not knowing is no reason to kill: the next reconcile decides.
		m.log.Warn("reconcile: node get failed, sandbox left as it is", "sandbox_id", id, "state", sb.State, "error", err)
		if sb.State == sandbox.StateRunning {
			m.arm(id, sb.Spec.ExecutionID, sb.EndAt)
		}
		return nil
	}
	if want := nodeState(sb, ns); want != sb.State {
		sb, err = m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
			s.State = want
			if want == sandbox.StatePaused {
				s.Epoch++
				s.Spec.PausedWithMemory = ns.PausedWithMemory
			}
			if s.Spec.EnvdVersion == "" {
				s.Spec.EnvdVersion = ns.EnvdVersion
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
	}
	if sb.State == sandbox.StateRunning {
		m.arm(id, sb.Spec.ExecutionID, sb.EndAt)
	}
	return nil
}

// reconcileOrphan kills sandbox id, which the node listed and the store
// did not, unless the store knows it by now.
func (m *Manager) reconcileOrphan(ctx context.Context, id string) {
	defer m.lock(id)()
	sb, err := m.st.GetSandbox(ctx, id)
	switch {
	case err == nil && sb.State != sandbox.StateKilled:
		return
	case err != nil && !errdefs.IsNotFound(err):
		m.log.Warn("reconcile: store read failed, node sandbox left as it is", "sandbox_id", id, "kill_reason", sandbox.KillOrphaned.String(), "error", err)
		return
	}
	m.log.Warn("killing sandbox unknown to the control plane", "sandbox_id", id, "kill_reason", sandbox.KillOrphaned.String())
	err = m.node.Kill(ctx, id, sandbox.KillOrphaned)
	switch {
	case errdefs.IsNotFound(err):
		// Gone already (e.g. killed since the listing): nothing was killed.
		return
	case err != nil:
		m.log.Warn("kill orphan", "sandbox_id", id, "kill_reason", sandbox.KillOrphaned.String(), "error", err)
		return
	}
	// No store row, so no event: the metric and the log carry it.
	m.killed.WithLabelValues(sandbox.KillOrphaned.String()).Inc()
}
