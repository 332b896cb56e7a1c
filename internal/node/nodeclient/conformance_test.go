package nodeclient_test

import (
	"testing"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeapi/nodeapitest"
)

// TestConformance runs the node contract's suite against the RPC client,
// through the noderpc server, to an agent over the fake driver: what
// crosses the wire must come back as the agent gave it.
func TestConformance(t *testing.T) {
	nodeapitest.Run(t, nodeapitest.Harness{New: func(t *testing.T) nodeapitest.Node {
		r := newRig(t, fake.Config{}, "conformance-token")
		return nodeapitest.Node{
			Service:  r.client,
			Template: nodeapi.Template{ID: "t", BuildID: "b", RootFS: "/rootfs", User: "user", Workdir: "/home/user"},
			Exit: func(t *testing.T, id string) {
				if err := r.drv.Exit(id, 0); err != nil {
					t.Fatalf("exit %q: %v", id, err)
				}
			},
		}
	}})
}
