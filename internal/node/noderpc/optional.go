package noderpc

import (
	"context"
	"fmt"
	"path/filepath"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// The optional parts of nodeapi.Service: a call to a part the served
// Service lacks answers unimplemented (ErrUnsupported on the client).

func unsupported(part string) error {
	return fmt.Errorf("node: %s: %w", part, errdefs.ErrUnsupported)
}

func (s *server) pooler() (nodeapi.Pooler, error) {
	if pl, ok := s.svc.(nodeapi.Pooler); ok {
		return pl, nil
	}
	return nil, unsupported("warm pools")
}

func (s *server) SetPool(ctx context.Context, req *connect.Request[nodepb.SetPoolRequest]) (*connect.Response[nodepb.SetPoolResponse], error) {
	pl, err := s.pooler()
	if err == nil {
		m := req.Msg
		if m.GetSize() < 0 {
			err = fmt.Errorf("pool of %q: size %d: %w", m.GetTemplate().GetId(), m.GetSize(), errdefs.ErrInvalid)
		} else {
			err = pl.SetPool(ctx, TemplateFromProto(m.GetTemplate()), ResourcesFromProto(m.GetResources()), int(m.GetSize()))
		}
	}
	if err != nil {
		return nil, s.fail("SetPool", err)
	}
	return connect.NewResponse(&nodepb.SetPoolResponse{}), nil
}

func (s *server) Reserve(ctx context.Context, req *connect.Request[nodepb.ReserveRequest]) (*connect.Response[nodepb.ReserveResponse], error) {
	pl, err := s.pooler()
	if err != nil {
		return nil, s.fail("Reserve", err)
	}
	id, found := pl.Reserve(TemplateFromProto(req.Msg.GetTemplate()), ResourcesFromProto(req.Msg.GetResources()))
	return connect.NewResponse(&nodepb.ReserveResponse{Id: id, Found: found}), nil
}

func (s *server) Unreserve(ctx context.Context, req *connect.Request[nodepb.UnreserveRequest]) (*connect.Response[nodepb.UnreserveResponse], error) {
	pl, err := s.pooler()
	if err != nil {
		return nil, s.fail("Unreserve", err)
	}
	pl.Unreserve(req.Msg.GetId())
	return connect.NewResponse(&nodepb.UnreserveResponse{}), nil
}

func (s *server) Pools(ctx context.Context, req *connect.Request[nodepb.PoolsRequest]) (*connect.Response[nodepb.PoolsResponse], error) {
	pl, err := s.pooler()
	if err != nil {
		return nil, s.fail("Pools", err)
	}
	out := &nodepb.PoolsResponse{Pools: map[string]*nodepb.PoolStatus{}}
	for id, st := range pl.Pools() {
		out.Pools[id] = PoolStatusToProto(st)
	}
	return connect.NewResponse(out), nil
}

func (s *server) TemplatesInUse(ctx context.Context, req *connect.Request[nodepb.TemplatesInUseRequest]) (*connect.Response[nodepb.TemplatesInUseResponse], error) {
	h, ok := s.svc.(nodeapi.TemplateHolder)
	if !ok {
		return nil, s.fail("TemplatesInUse", unsupported("templates in use"))
	}
	uses, err := h.TemplatesInUse(ctx)
	if err != nil {
		return nil, s.fail("TemplatesInUse", err)
	}
	out := &nodepb.TemplatesInUseResponse{}
	for _, u := range uses {
		out.Templates = append(out.Templates, TemplateUseToProto(u))
	}
	return connect.NewResponse(out), nil
}

// SnapshotSandbox is the wire's first sandbox snapshot, into a directory
// the caller named: superseded by TakeSandboxSnapshot, which names none.
func (s *server) SnapshotSandbox(ctx context.Context, req *connect.Request[nodepb.SnapshotSandboxRequest]) (*connect.Response[nodepb.SnapshotSandboxResponse], error) {
	return nil, s.fail("SnapshotSandbox", unsupported("sandbox snapshots into a named directory (use TakeSandboxSnapshot)"))
}

func (s *server) SnapshotTemplate(ctx context.Context, req *connect.Request[nodepb.SnapshotTemplateRequest]) (*connect.Response[nodepb.SnapshotTemplateResponse], error) {
	sn, ok := s.svc.(nodeapi.TemplateSnapshotter)
	if !ok {
		return nil, s.fail("SnapshotTemplate", unsupported("template snapshots"))
	}
	if err := s.checkDir(req.Msg.GetDir()); err != nil {
		return nil, s.fail("SnapshotTemplate", err)
	}
	if err := sn.Snapshot(ctx, TemplateFromProto(req.Msg.GetTemplate()), req.Msg.GetReadyCmd(), req.Msg.GetDir()); err != nil {
		return nil, s.fail("SnapshotTemplate", err)
	}
	return connect.NewResponse(&nodepb.SnapshotTemplateResponse{}), nil
}

func (s *server) DeleteSnapshot(ctx context.Context, req *connect.Request[nodepb.DeleteSnapshotRequest]) (*connect.Response[nodepb.DeleteSnapshotResponse], error) {
	sn, ok := s.svc.(nodeapi.TemplateSnapshotter)
	if !ok {
		return nil, s.fail("DeleteSnapshot", unsupported("snapshots"))
	}
	if err := s.checkDir(req.Msg.GetDir()); err != nil {
		return nil, s.fail("DeleteSnapshot", err)
	}
	if err := sn.DeleteSnapshot(ctx, req.Msg.GetDir()); err != nil {
		return nil, s.fail("DeleteSnapshot", err)
	}
	return connect.NewResponse(&nodepb.DeleteSnapshotResponse{}), nil
}

// checkDir refuses a snapshot directory that is not a clean absolute path
// or, with Options.SnapshotRoot, not under it.
func (s *server) checkDir(dir string) error {
	if dir == "" || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || dir == "/" {
		return fmt.Errorf("snapshot dir %q: want a clean absolute path: %w", dir, errdefs.ErrInvalid)
	}
	if s.snapshotRoot != "" {
		if rel, err := filepath.Rel(s.snapshotRoot, dir); err != nil || rel == "." || !filepath.IsLocal(rel) {
			return fmt.Errorf("snapshot dir %q: not under the node's data directory: %w", dir, errdefs.ErrInvalid)
		}
	}
	return nil
}
