package nodebuild

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/api/node/nodepbconnect"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errconnect"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
)

// Where a node gets a build it lacks: the control plane's answer
// (LocateHandler, the ControlPlaneService, for the node a call
// authenticates as) and the node's side of the question (Locator).

// LocateHandler returns the path prefix and the handler of the control
// plane's ControlPlaneService, whose LocateBuild answers the node the
// call authenticates as (RemoteConfig.Authenticate). For a build the
// node needs (a sandbox of it is placed there), the answer is the
// build's source: its records and the ready nodes that hold it, the node
// that built it first, each with a pull grant for the asking node. For a
// build the node only holds (it built it, or says it holds it), the
// answer says whether the build is still current and nothing else. Any
// other build is permission_denied: a node is not trusted beyond its own
// sandboxes.
func (r *Remote) LocateHandler() (string, http.Handler) {
	path, h := nodepbconnect.NewControlPlaneServiceHandler(&locateServer{r: r}, handlerOptions(nil)...)
	return path, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// The node is told who it is before Connect reads the call: the
		// check needs the request itself (its peer, in the insecure mode).
		id, err := "", fmt.Errorf("no node authentication: %w", errdefs.ErrUnauthorized)
		if r.cfg.Authenticate != nil {
			id, err = r.cfg.Authenticate(req)
		}
		h.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), callerKey{}, caller{id: id, err: err})))
	})
}

type callerKey struct{}

// caller is the node a call to the control plane authenticated as, or
// why it did not.
type caller struct {
	id  string
	err error
}

// locateServer is the control plane's ControlPlaneService.
type locateServer struct{ r *Remote }

var _ nodepbconnect.ControlPlaneServiceHandler = (*locateServer)(nil)

func (s *locateServer) LocateBuild(ctx context.Context, req *connect.Request[nodepb.LocateBuildRequest]) (*connect.Response[nodepb.LocateBuildResponse], error) {
	c, _ := ctx.Value(callerKey{}).(caller)
	if c.err != nil {
		// Its class only: a caller not authenticated is told nothing else.
		s.r.log.Warn("locate build: node refused", "remote_addr", req.Peer().Addr, "error", c.err)
		return nil, errconnect.New(cmp.Or(errdefs.Class(c.err), errdefs.ErrUnavailable), "the node was not authenticated")
	}
	src, err := s.r.locate(ctx, c.id, req.Msg.GetBuildId())
	if err != nil {
		s.r.log.Info("locate build", "node_id", c.id, "build_id", req.Msg.GetBuildId(), "error", err)
		return nil, rpcError(err)
	}
	return connect.NewResponse(&nodepb.LocateBuildResponse{Source: src}), nil
}

// locate answers node nodeID ("" for any node) about build buildID.
func (r *Remote) locate(ctx context.Context, nodeID, buildID string) (*nodepb.BuildSource, error) {
	if err := templates.CheckID("build", buildID); err != nil {
		return nil, err
	}
	b, err := r.cat.Build(ctx, buildID)
	if err != nil {
		return nil, err
	}
	if b.Status != templates.BuildReady {
		return nil, fmt.Errorf("build %q is %s: %w", buildID, b.Status, errdefs.ErrConflict)
	}
	if nodeID == "" {
		return r.source(ctx, buildID, "")
	}
	need, err := r.needs(ctx, nodeID, buildID)
	if err != nil {
		return nil, err
	}
	if need {
		return r.source(ctx, buildID, nodeID)
	}
	n, err := r.cfg.Nodes.GetNode(ctx, nodeID)
	if err != nil && !errdefs.IsNotFound(err) {
		return nil, err
	}
	if b.NodeID != nodeID && (n == nil || !n.HoldsTemplate(buildID)) {
		return nil, errdefs.Publicf(errdefs.ErrForbidden, "node %q does not need build %s", nodeID, buildID)
	}
	full, err := r.source(ctx, buildID, "")
	if err != nil {
		return nil, err
	}
	return &nodepb.BuildSource{Current: full.GetCurrent(), Superseded: superseded(full)}, nil
}

// needs reports whether node nodeID needs build buildID: a sandbox of it
// (starting, running, pausing or paused) is placed there.
func (r *Remote) needs(ctx context.Context, nodeID, buildID string) (bool, error) {
	sbs, err := r.cfg.Nodes.ListSandboxes(ctx, store.SandboxFilter{NodeID: nodeID, States: store.LiveStates})
	if err != nil {
		return false, err
	}
	for _, sb := range sbs {
		if sb.Spec.BuildID == buildID {
			return true, nil
		}
	}
	return false, nil
}

// source is the whole answer about ready build buildID: its records and
// the ready nodes that hold it (the node that built it first), each with
// a grant for node requester ("": none).
func (r *Remote) source(ctx context.Context, buildID, requester string) (*nodepb.BuildSource, error) {
	b, err := r.cat.Build(ctx, buildID)
	if err != nil {
		return nil, err
	}
	t, err := r.cat.Store().GetTemplate(ctx, b.TemplateID)
	if err != nil {
		return nil, err
	}
	nodes, err := r.cfg.Nodes.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	src := SourceOf(t, b)
	for _, tg := range t.Tags {
		src.Current = src.Current || tg.BuildID == b.ID
	}
	for _, n := range nodes {
		if n.Liveness != store.NodeReady || n.ID == requester || n.ID != b.NodeID && !n.HoldsTemplate(buildID) {
			continue
		}
		h := &nodepb.BuildHolder{Address: n.RPCAddress}
		if requester != "" && r.cfg.Grant != nil {
			if h.Grant, err = r.cfg.Grant(ctx, n.ID, buildID, requester); err != nil {
				r.log.Warn("no pull grant for a holder", "node_id", n.ID, "build_id", buildID, "error", err)
				continue
			}
		}
		if n.ID == b.NodeID {
			src.Holders = append([]*nodepb.BuildHolder{h}, src.Holders...)
		} else {
			src.Holders = append(src.Holders, h)
		}
	}
	return src, nil
}

// Locator asks the control plane at APIURL where builds can be had (a
// node's NodeConfig.Locate), with the node's token.
type Locator struct {
	APIURL string
	Token  string
	// HTTP carries the questions (default: nodeauth.Client(nil)).
	HTTP *http.Client
}

// Locate implements NodeConfig.Locate.
func (l *Locator) Locate(ctx context.Context, buildID string) (*nodepb.BuildSource, error) {
	if err := templates.CheckID("build", buildID); err != nil {
		return nil, err
	}
	c := l.HTTP
	if c == nil {
		c = nodeauth.Client(nil)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	rpc := nodepbconnect.NewControlPlaneServiceClient(c, strings.TrimSuffix(l.APIURL, "/"), clientOptions(bearer{token: l.Token})...)
	resp, err := rpc.LocateBuild(ctx, connect.NewRequest(&nodepb.LocateBuildRequest{BuildId: buildID}))
	if err != nil {
		return nil, fmt.Errorf("locate build %s: %w", buildID, fromRPC(err))
	}
	if resp.Msg.GetSource() == nil {
		return nil, fmt.Errorf("locate build %s: an empty answer: %w", buildID, errdefs.ErrUnavailable)
	}
	return resp.Msg.GetSource(), nil
}
