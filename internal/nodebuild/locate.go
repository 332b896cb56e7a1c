package nodebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
)

// Where a node gets a build it lacks: the control plane's answer
// (LocateHandler, for the node a request authenticates as) and the node's
// side of the question (Locator).

// LocatePath is where the control plane answers nodes asking where a
// build can be had (behind the node's token).
const LocatePath = PathPrefix + "locate/"

// LocateHandler answers GET LocatePath+"<buildID>" for the node the
// request authenticates as (RemoteConfig.Authenticate). For a build the
// node needs (a sandbox of it is placed there), the answer is the
// build's Source: its records and the ready nodes that hold it, the node
// that built it first, each with a pull grant for the asking node. For a
// build the node only holds (it built it, or says it holds it), the
// answer says whether the build is still current and nothing else. Any
// other build is 403: a node is not trusted beyond its own sandboxes.
func (r *Remote) LocateHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.cfg.Authenticate == nil {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		nodeID, err := r.cfg.Authenticate(req)
		if err != nil {
			status := http.StatusUnauthorized
			if !errors.Is(err, errdefs.ErrUnauthorized) {
				status = errhttp.Status(err)
			}
			r.log.Warn("locate build: node refused", "remote_addr", req.RemoteAddr, "error", err)
			http.Error(w, http.StatusText(status), status)
			return
		}
		src, err := r.locate(req.Context(), nodeID, strings.TrimPrefix(req.URL.Path, LocatePath))
		if err != nil {
			status := errhttp.Status(err)
			r.log.Info("locate build", "node_id", nodeID, "path", req.URL.Path, "status", status, "error", err)
			http.Error(w, http.StatusText(status), status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(src) //nolint:errcheck
	})
}

// locate answers node nodeID ("" for any node) about build buildID.
func (r *Remote) locate(ctx context.Context, nodeID, buildID string) (*Source, error) {
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
	return &Source{Holders: []Holder{}, Current: full.Current, Superseded: superseded(full)}, nil
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
func (r *Remote) source(ctx context.Context, buildID, requester string) (*Source, error) {
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
		h := Holder{Address: n.RPCAddress}
		if requester != "" && r.cfg.Grant != nil {
			if h.Grant, err = r.cfg.Grant(ctx, n.ID, buildID, requester); err != nil {
				r.log.Warn("no pull grant for a holder", "node_id", n.ID, "build_id", buildID, "error", err)
				continue
			}
		}
		if n.ID == b.NodeID {
			src.Holders = append([]Holder{h}, src.Holders...)
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
func (l *Locator) Locate(ctx context.Context, buildID string) (*Source, error) {
	if err := templates.CheckID("build", buildID); err != nil {
		return nil, err
	}
	c := l.HTTP
	if c == nil {
		c = nodeauth.Client(nil)
	}
	var src Source
	if err := call(ctx, c, http.MethodGet, strings.TrimSuffix(l.APIURL, "/")+LocatePath+buildID, l.Token, nil, &src); err != nil {
		return nil, err
	}
	return &src, nil
}
