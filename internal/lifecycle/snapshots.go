package lifecycle

import (
	"context"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Sandbox snapshots and kept logs go through the node contract
// (nodeapi.SandboxSnapshotter, nodeapi.LogSource) to the node that runs
// the sandbox, in process under `warren serve` and over the node RPC
// under `warren api`.

// CanSnapshot reports whether the manager's nodes take sandbox snapshots
// (a node whose driver cannot checkpoint memory still refuses them).
func (m *Manager) CanSnapshot() bool { return m.snaps != nil }

// Snapshot takes a snapshot of running sandbox id of team teamID as build
// req.BuildID of template req.TemplateID, on the sandbox's node, which
// then holds it; the sandbox keeps running. It returns what the node
// reports of the snapshot and that node's ID.
func (m *Manager) Snapshot(ctx context.Context, teamID, id string, req nodeapi.SnapshotRequest) (*nodeapi.SandboxSnapshot, string, error) {
	if m.snaps == nil {
		return nil, "", errdefs.Publicf(errdefs.ErrUnsupported, "sandbox snapshots")
	}
	sb, err := m.Get(ctx, teamID, id)
	if err != nil {
		return nil, "", err
	}
	if sb.State != sandbox.StateRunning {
		return nil, "", errdefs.Publicf(errdefs.ErrConflict, "sandbox %q is %s, not running", id, sb.State)
	}
	req.TeamID = sb.TeamID
	nodeID := sb.Spec.NodeID
	if nodeID == "" {
		nodeID = m.cfg.NodeID
	}
	start := time.Now()
	snap, err := m.snaps.SnapshotSandbox(ctx, id, req)
	if err != nil {
		return nil, "", err
	}
	m.log.Info("sandbox snapshot taken on its node", "sandbox_id", id, "node_id", nodeID, "build_id", req.BuildID,
		"travels", snap.Travels(), "took", time.Since(start).String())
	return snap, nodeID, nil
}

// DeleteSnapshot deletes the sandbox snapshot a node took as build
// buildID, for one whose record failed.
func (m *Manager) DeleteSnapshot(ctx context.Context, buildID string) error {
	if m.snaps == nil {
		return errdefs.Publicf(errdefs.ErrUnsupported, "sandbox snapshots")
	}
	return m.snaps.DeleteSandboxSnapshot(ctx, buildID)
}

// KeptLogs returns the log running sandbox id keeps from start on, read
// by its node; nil for a sandbox that is not running (reading logs never
// wakes one) or whose node serves none.
func (m *Manager) KeptLogs(ctx context.Context, id string, start time.Time) ([]nodeapi.LogEntry, error) {
	if m.logs == nil {
		return nil, nil
	}
	sb, err := m.st.GetSandbox(ctx, id)
	if err != nil || sb.State != sandbox.StateRunning {
		return nil, err
	}
	return m.logs.SandboxLogs(ctx, id, start)
}
