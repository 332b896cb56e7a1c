package node_test

import (
	"testing"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/nodeapi/nodeapitest"
)

// TestConformance runs the node contract's suite against the agent over
// the fake driver and in-memory host pieces.
func TestConformance(t *testing.T) {
	nodeapitest.Run(t, nodeapitest.Harness{New: func(t *testing.T) nodeapitest.Node {
		e := newEnv(t, fake.Config{})
		return nodeapitest.Node{
			Service:  e.start(),
			Template: createReq("x").Template,
			Exit: func(t *testing.T, id string) {
				if err := e.fake.Exit(id, 0); err != nil {
					t.Fatalf("exit %q: %v", id, err)
				}
			},
		}
	}})
}
