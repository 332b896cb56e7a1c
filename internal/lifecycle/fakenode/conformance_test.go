package fakenode_test

import (
	"testing"

	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeapi/nodeapitest"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// TestConformance holds the control plane's fake node to the node
// contract, so that what lifecycle tests see is what a real node does.
func TestConformance(t *testing.T) {
	nodeapitest.Run(t, nodeapitest.Harness{New: func(t *testing.T) nodeapitest.Node {
		n := fakenode.New()
		return nodeapitest.Node{
			Service:  n,
			Template: nodeapi.Template{ID: "tmpl", BuildID: "build1", RootFS: "/templates/tmpl/rootfs"},
			Exit:     func(t *testing.T, id string) { n.Exit(id, sandbox.KillExited) },
			// The fake has no pools, samples or snapshots.
			Partial: true,
		}
	}})
}
