package noderpc

import (
	"context"
	"fmt"

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
		var tmpl nodeapi.Template
		switch {
		case m.GetSize() < 0:
			err = fmt.Errorf("pool of %q: size %d: %w", m.GetTemplate().GetId(), m.GetSize(), errdefs.ErrInvalid)
		case m.GetSize() == 0 && m.GetTemplate().GetRootfs() == "" && m.GetTemplate().GetSnapshotDir() == "":
			// Removing a pool needs no copy of its template.
			err = pl.SetPool(ctx, nodeapi.Template{ID: m.GetTemplate().GetId(), BuildID: m.GetTemplate().GetBuildId()}, ResourcesFromProto(m.GetResources()), 0)
		default:
			if tmpl, err = s.template(ctx, "", m.GetTemplate()); err == nil {
				err = pl.SetPool(ctx, tmpl, ResourcesFromProto(m.GetResources()), int(m.GetSize()))
			}
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
	tmpl, err := s.template(ctx, "", req.Msg.GetTemplate())
	if err != nil {
		return nil, s.fail("Reserve", err)
	}
	id, found := pl.Reserve(tmpl, ResourcesFromProto(req.Msg.GetResources()))
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

// The snapshot calls of the proto that name directories on the node: none
// is served (a directory does not cross the wire; the node's own builder
// takes its template snapshots in process). SnapshotSandbox was the wire's
// first sandbox snapshot, into a directory the caller named: superseded by
// TakeSandboxSnapshot, which names none.

func noSnapshotDirs(what string) error {
	return fmt.Errorf("%s: a snapshot directory does not cross the wire (sandbox snapshots: TakeSandboxSnapshot): %w", what, errdefs.ErrInvalid)
}

func (s *server) SnapshotSandbox(ctx context.Context, req *connect.Request[nodepb.SnapshotSandboxRequest]) (*connect.Response[nodepb.SnapshotSandboxResponse], error) {
	return nil, s.fail("SnapshotSandbox", noSnapshotDirs("sandbox snapshot"))
}

func (s *server) SnapshotTemplate(ctx context.Context, req *connect.Request[nodepb.SnapshotTemplateRequest]) (*connect.Response[nodepb.SnapshotTemplateResponse], error) {
	return nil, s.fail("SnapshotTemplate", noSnapshotDirs("template snapshot"))
}

func (s *server) DeleteSnapshot(ctx context.Context, req *connect.Request[nodepb.DeleteSnapshotRequest]) (*connect.Response[nodepb.DeleteSnapshotResponse], error) {
	return nil, s.fail("DeleteSnapshot", noSnapshotDirs("snapshot deletion"))
}
