package placement

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

var (
	_ nodeapi.SandboxSnapshotter = (*Service)(nil)
	_ nodeapi.LogSource          = (*Service)(nil)
)

// SnapshotSandbox implements nodeapi.SandboxSnapshotter on the sandbox's
// node, which then holds the snapshot's build (and serves it to the
// others, which pull it as any build).
func (s *Service) SnapshotSandbox(ctx context.Context, id string, req nodeapi.SnapshotRequest) (*nodeapi.SandboxSnapshot, error) {
	n, svc, err := s.reachable(ctx, id)
	if err != nil {
		return nil, err
	}
	sn, ok := svc.(nodeapi.SandboxSnapshotter)
	if !ok {
		return nil, fmt.Errorf("sandbox %q: node %q takes no snapshots: %w", id, n.ID, errdefs.ErrUnsupported)
	}
	return sn.SnapshotSandbox(ctx, id, req)
}

// DeleteSandboxSnapshot implements nodeapi.SandboxSnapshotter: every node
// that is not lost is asked, and the one that took the snapshot deletes
// it; ErrNotFound when none did.
func (s *Service) DeleteSandboxSnapshot(ctx context.Context, buildID string) error {
	nodes, err := s.liveNodes(ctx)
	if err != nil {
		return err
	}
	deleted := false
	var errs []error
	for _, n := range nodes {
		sn, ok := s.client(n).(nodeapi.SandboxSnapshotter)
		if !ok {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		err := sn.DeleteSandboxSnapshot(cctx, buildID)
		cancel()
		switch {
		case err == nil:
			deleted = true
		case !errdefs.IsNotFound(err) && !errdefs.IsUnsupported(err):
			errs = append(errs, fmt.Errorf("node %q: %w", n.ID, err))
		}
	}
	switch {
	case deleted:
		return nil
	case len(errs) > 0:
		return fmt.Errorf("sandbox snapshot %q: %w", buildID, errors.Join(errs...))
	}
	return fmt.Errorf("sandbox snapshot %q: on no node: %w", buildID, errdefs.ErrNotFound)
}

// SandboxLogs implements nodeapi.LogSource on the sandbox's node, which
// reads the sandbox's envd itself.
func (s *Service) SandboxLogs(ctx context.Context, id string, start time.Time) ([]nodeapi.LogEntry, error) {
	n, svc, err := s.reachable(ctx, id)
	if err != nil {
		return nil, err
	}
	ls, ok := svc.(nodeapi.LogSource)
	if !ok {
		return nil, fmt.Errorf("sandbox %q logs: node %q serves none: %w", id, n.ID, errdefs.ErrUnsupported)
	}
	return ls.SandboxLogs(ctx, id, start)
}

// EgressLog implements nodeapi.EgressLogger on the sandbox's node.
func (s *Service) EgressLog(ctx context.Context, id string) ([]nodeapi.EgressEntry, error) {
	n, svc, err := s.reachable(ctx, id)
	if err != nil {
		return nil, err
	}
	el, ok := svc.(nodeapi.EgressLogger)
	if !ok {
		return nil, fmt.Errorf("sandbox %q egress log: node %q keeps none: %w", id, n.ID, errdefs.ErrUnsupported)
	}
	return el.EgressLog(ctx, id)
}
