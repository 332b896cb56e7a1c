package nodeinteg

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeapi/nodeapitest"
	"github.com/warren-sandbox/warren/internal/nodebuild/nodebuildtest"
)

// TestConformanceRunsc runs the node contract's suite against the agent
// over real gVisor sandboxes, one host (cgroup root, network slot pool,
// data dir of its own) per case, the cases one at a time.
func TestConformanceRunsc(t *testing.T) {
	nodeapitest.Run(t, nodeapitest.Harness{Serial: true, New: func(t *testing.T) nodeapitest.Node {
		return runscNode(t, false)
	}})
}

// TestConformanceRunscRPC runs the suite against the RPC client, through
// the noderpc server (with a token and a template resolver, as `warren
// node` serves it), to the agent over real gVisor sandboxes.
func TestConformanceRunscRPC(t *testing.T) {
	nodeapitest.Run(t, nodeapitest.Harness{Serial: true, New: func(t *testing.T) nodeapitest.Node {
		return runscNode(t, true)
	}})
}

func runscNode(t *testing.T, rpc bool) nodeapitest.Node {
	h := newHost(t)
	a, drv := h.agent()
	t.Cleanup(func() { a.Close() })
	// Sandbox snapshots are kept in a catalog of the node's own, as
	// `warren node` keeps them.
	ss := nodebuildtest.New(t, a, a)
	n := nodeapitest.Node{
		Service:   a,
		Snapshots: ss,
		Resolve:   ss.Resolve,
		Template:  nodeapi.Template{ID: "base", BuildID: "b", RootFS: h.tmpl, User: "user", Workdir: "/home/user"},
		// The sandbox's init ends as if it had exited by itself: the
		// runtime kills it behind the agent's back.
		Exit: func(t *testing.T, id string) {
			if err := drv.Kill(context.Background(), id); err != nil {
				t.Fatalf("kill %q behind the agent: %v", id, err)
			}
		},
	}
	if rpc {
		const token = "conformance-runsc-token"
		own := n.Template
		// The suite's template is the node's own copy; the sandbox
		// snapshots' builds are its catalog's.
		resolve := func(ctx context.Context, teamID string, t nodeapi.Template) (nodeapi.Template, error) {
			if t.ID == own.ID && t.BuildID == own.BuildID {
				return own, nil
			}
			if t.ID == own.ID {
				return nodeapi.Template{}, fmt.Errorf("template %q build %q: %w", t.ID, t.BuildID, errdefs.ErrNotFound)
			}
			return ss.Resolve(ctx, teamID, t)
		}
		n.Remote = true
		mux := http.NewServeMux()
		mux.Handle(noderpc.NewHandler(a, noderpc.Options{Token: token, ResolveTemplate: resolve, SandboxSnapshots: ss}))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		n.Service = nodeclient.New(srv.URL, nodeclient.Options{HTTPClient: srv.Client(), Token: token})
		n.Snapshots, n.Resolve = nil, nil // the client's own; the server resolves
	}
	return n
}
