// Package nodebuildtest gives tests of the node contract the node side of
// sandbox snapshots as `warren node` has it: the agent's snapshots kept
// as builds of a catalog of the test's own (nodebuild.SandboxSnapshots
// over a nodebuild.Node), and the resolver of the creates that name them.
package nodebuildtest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodebuild"
)

// Snapshots are a node's sandbox snapshots and its catalog.
type Snapshots struct {
	*nodebuild.SandboxSnapshots
	Local *builder.Local
	Node  *nodebuild.Node
}

// Resolve resolves a template that names a build of the catalog (the
// node RPC's noderpc.Options.ResolveTemplate, nodeapitest.Node.Resolve).
func (s *Snapshots) Resolve(ctx context.Context, teamID string, t nodeapi.Template) (nodeapi.Template, error) {
	return s.Node.Resolve(ctx, teamID, t)
}

// New returns the sandbox snapshots of agent, kept in a new catalog under
// t's temporary directory; snaps, when set, makes the snapshots of other
// nodes restorable (nodebuild.NodeConfig.Snapshots); opts change the
// node's configuration (its Locate, Token).
func New(t testing.TB, agent nodebuild.SandboxAgent, snaps nodebuild.Snapshots, opts ...func(*nodebuild.NodeConfig)) *Snapshots {
	t.Helper()
	local, err := builder.OpenLocal(builder.LocalConfig{DataDir: filepath.Join(t.TempDir(), "templates")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Service.Close)
	cfg := nodebuild.NodeConfig{Catalog: local.Catalog, Service: local.Service, Snapshots: snaps}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := nodebuild.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := nodebuild.NewSandboxSnapshots(nodebuild.SandboxSnapshotsConfig{Agent: agent, Catalog: local.Catalog, Node: n})
	if err != nil {
		t.Fatal(err)
	}
	return &Snapshots{SandboxSnapshots: ss, Local: local, Node: n}
}
