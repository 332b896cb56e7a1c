package noderole

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/memhost"
	nodevolumes "github.com/warren-sandbox/warren/internal/node/volumes"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// Resolver resolves a team's template reference (an ID, or an alias)
// to what a node starts sandboxes from (apiserver.TemplateResolver).
type Resolver interface {
	Resolve(ctx context.Context, teamID, ref string) (nodeapi.Template, error)
}

// Node is a machine's node as Open makes it: the agent and what comes
// with it, typed.
type Node struct {
	// Service is the agent, as the node contract.
	Service nodeapi.Service
	// Templates resolves templates for the agent's creates.
	Templates Resolver
	// Agent, Local (the template catalog and build service) and Volumes
	// are those of a real driver (nil with the fake one: its sandboxes
	// are records only, with no catalog, snapshots or volumes).
	Agent   *node.Agent
	Local   *builder.Local
	Volumes *nodevolumes.Manager
}

// Open makes the node agent of h.Driver and what goes with it, on sys
// (which closes them).
func Open(ctx context.Context, sys *app.System, h Host) (*Node, error) {
	if h.Driver == "fake" {
		return fakeNode(ctx, sys, h)
	}
	return realNode(ctx, sys, h)
}

// fakeNode runs the real node agent over the fake runtime driver and
// in-memory host pieces: sandboxes exist only as records, with no envd.
// It is for tests of the control plane and of the CLI.
func fakeNode(ctx context.Context, sys *app.System, h Host) (*Node, error) {
	nc := node.Config{
		DataDir:  filepath.Join(h.DataDir, "node"),
		Driver:   fake.New(fake.Config{}),
		Cgroups:  memhost.NewCgroups(),
		Net:      memhost.NewNet(),
		Layers:   memhost.NewLayers(),
		Envd:     &memhost.Envd{},
		Logger:   sys.Logger.With("component", "node"),
		Registry: sys.Registry,
		// Sandboxes of the fake driver do not survive a restart of the
		// process; nothing on the host to reclaim either.
		ReclaimInterval: -1,
	}
	h.Node.apply(&nc)
	a, err := node.New(ctx, nc)
	if err != nil {
		return nil, fmt.Errorf("node agent: %w", err)
	}
	sys.OnClose("node agent", func() { a.Close() })
	return &Node{Service: a, Templates: FakeTemplates}, nil
}

// FakeTemplates are the templates of the fake driver's node: base, its
// files nowhere.
var FakeTemplates = StaticTemplates{"base": nodeapi.Template{ID: "base", BuildID: "base", RootFS: "/nonexistent/fake-rootfs", User: "user", Workdir: "/home/user"}}

// StaticTemplates resolves a fixed set of templates by ID.
type StaticTemplates map[string]nodeapi.Template

// Resolve implements Resolver.
func (s StaticTemplates) Resolve(_ context.Context, _, ref string) (nodeapi.Template, error) {
	t, ok := s[ref]
	if !ok {
		return nodeapi.Template{}, fmt.Errorf("template %q: %w", ref, errdefs.ErrNotFound)
	}
	return t, nil
}

var _ nodeapi.Service = (*node.Agent)(nil)
