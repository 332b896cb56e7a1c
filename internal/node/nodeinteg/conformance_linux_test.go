package nodeinteg

import (
	"context"
	"testing"

	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeapi/nodeapitest"
)

// TestConformanceRunsc runs the node contract's suite against the agent
// over real gVisor sandboxes, one host (cgroup root, network slot pool,
// data dir of its own) per case, the cases one at a time.
func TestConformanceRunsc(t *testing.T) {
	nodeapitest.Run(t, nodeapitest.Harness{Serial: true, New: func(t *testing.T) nodeapitest.Node {
		h := newHost(t)
		a, drv := h.agent()
		t.Cleanup(func() { a.Close() })
		return nodeapitest.Node{
			Service:  a,
			Template: nodeapi.Template{ID: "base", BuildID: "b", RootFS: h.tmpl, User: "user", Workdir: "/home/user"},
			// The sandbox's init ends as if it had exited by itself:
			// the runtime kills it behind the agent's back.
			Exit: func(t *testing.T, id string) {
				if err := drv.Kill(context.Background(), id); err != nil {
					t.Fatalf("kill %q behind the agent: %v", id, err)
				}
			},
		}
	}})
}
