package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/memhost"
	nodevolumes "github.com/warren-sandbox/warren/internal/node/volumes"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodebuild"
)

// nodeParts is what buildNode makes: the node agent, the template resolver
// that goes with it and, with a real driver, the template catalog and
// build service (nil with the fake driver).
type nodeParts struct {
	node      nodeapi.Service
	templates apiserver.TemplateResolver
	local     *builder.Local
	agent     *node.Agent
	// volumes are the node's volumes (nil with the fake driver).
	volumes *nodevolumes.Manager
	close   closer
}

// buildNode makes the in-process node agent for cfg.Driver and the
// template resolver that goes with it.
func buildNode(ctx context.Context, cfg Config, eg *egress.Policy, reg prometheus.Registerer) (*nodeParts, error) {
	switch cfg.Driver {
	case "fake":
		n, t, c, err := fakeNode(ctx, cfg, reg)
		if err != nil {
			return nil, err
		}
		return &nodeParts{node: n, templates: t, close: c}, nil
	default:
		return realNode(ctx, cfg, eg, reg)
	}
}

// fakeNode runs the real node agent over the fake runtime driver and
// in-memory host pieces: sandboxes exist only as records, with no envd.
// It is for tests of the control plane and of the CLI.
func fakeNode(ctx context.Context, cfg Config, reg prometheus.Registerer) (nodeapi.Service, apiserver.TemplateResolver, closer, error) {
	nc := node.Config{
		DataDir:  filepath.Join(cfg.DataDir, "node"),
		Driver:   fake.New(fake.Config{}),
		Cgroups:  memhost.NewCgroups(),
		Net:      memhost.NewNet(),
		Layers:   memhost.NewLayers(),
		Envd:     &memhost.Envd{},
		Logger:   cfg.Logger.With("component", "node"),
		Registry: reg,
		// Sandboxes of the fake driver do not survive a restart of the
		// process; nothing on the host to reclaim either.
		ReclaimInterval: -1,
	}
	cfg.Node.apply(&nc)
	a, err := node.New(ctx, nc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("node agent: %w", err)
	}
	return a, StaticTemplates{"base": nodeapi.Template{ID: "base", BuildID: "base", RootFS: "/nonexistent/fake-rootfs", User: "user", Workdir: "/home/user"}},
		func() { a.Close() }, nil
}

// StaticTemplates resolves a fixed set of templates by ID.
type StaticTemplates map[string]nodeapi.Template

// Resolve implements apiserver.TemplateResolver.
func (s StaticTemplates) Resolve(_ context.Context, _, ref string) (nodeapi.Template, error) {
	t, ok := s[ref]
	if !ok {
		return nodeapi.Template{}, fmt.Errorf("template %q: %w", ref, errdefs.ErrNotFound)
	}
	return t, nil
}

// serveSnapshots is the sandbox snapshots of `warren serve`'s agent, kept
// in its catalog, which is the API's too (nil without a real driver: the
// fake one has no catalog). The snapshots older versions marked with a
// file are recorded as such first.
func serveSnapshots(ctx context.Context, parts *nodeParts, log *slog.Logger) (nodeapi.SandboxSnapshotter, error) {
	if parts.agent == nil || parts.local == nil {
		return nil, nil
	}
	if n, err := nodebuild.AdoptMarkers(ctx, parts.local.Catalog); err != nil {
		return nil, fmt.Errorf("sandbox snapshots of an earlier version: %w", err)
	} else if n > 0 {
		log.Info("recorded the sandbox snapshots an earlier version marked", "count", n)
	}
	return nodebuild.NewSandboxSnapshots(nodebuild.SandboxSnapshotsConfig{Agent: parts.agent, Catalog: parts.local.Catalog,
		Logger: log.With("component", "snapshots")})
}
