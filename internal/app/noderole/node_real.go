package noderole

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/runc"
	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/rootfslayers"
	nodevolumes "github.com/warren-sandbox/warren/internal/node/volumes"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// realNode builds the node agent over runsc or runc with the host's
// cgroups, network slots and root filesystem layers, and the template
// catalog, whose base template it makes sure of first (the first start
// unpacks BaseRootFSTar, or builds it with mmdebstrap).
func realNode(ctx context.Context, sys *app.System, cfg Host) (*Node, error) {
	log, reg := sys.Logger.With("component", "node"), sys.Registry
	cgRoot := cfg.CgroupRoot
	var drv driver.Driver
	var snapshotRuntime string // what this node's template snapshots are tied to
	switch cfg.Driver {
	case "runsc":
		d, err := runsc.New(runsc.Config{Path: cfg.RunscPath, StateDir: filepath.Join(cfg.DataDir, "runsc"), CgroupRoot: "/" + cgRoot, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("runsc driver: %w", err)
		}
		drv = d
		if snapshotRuntime, err = d.Identity(); err != nil {
			log.Warn("template snapshots stay on this node", "error", err)
		}
	case "runc":
		d, err := runc.New(runc.Config{Path: cfg.RuncPath, StateDir: filepath.Join(cfg.DataDir, "runc"), CgroupRoot: "/" + cgRoot, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("runc driver: %w", err)
		}
		drv = d
	default:
		return nil, fmt.Errorf("driver %q: %w", cfg.Driver, errdefs.ErrInvalid)
	}
	if _, err := os.Stat(cfg.EnvdPath); err != nil {
		return nil, fmt.Errorf("envd binary %q (build it with make build): %w", cfg.EnvdPath, errdefs.ErrUnavailable)
	}
	cg, err := cgroup.NewManager(cgRoot, log)
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	pool, err := netslot.NewPool(cfg.Net, log)
	if err != nil {
		return nil, fmt.Errorf("network slots: %w", err)
	}
	layersRoot := filepath.Join(cfg.DataDir, "layers")
	rm, err := rootfs.New(rootfs.Config{DataRoot: layersRoot}, log)
	if err != nil {
		return nil, fmt.Errorf("root filesystems: %w", err)
	}
	vm, err := nodevolumes.New(ctx, nodevolumes.Config{Root: filepath.Join(cfg.DataDir, "volumes"), Logger: log.With("component", "volumes"), Registry: reg})
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	sys.OnClose("volumes", func() { vm.Close() })
	// Build steps run in sandboxes of their own; what a crash left of
	// them goes before the node agent's start-up reclaim frees their slots.
	bs, err := newBuildSandboxes(cfg, cgRoot, pool, log)
	if err != nil {
		return nil, err
	}
	if n, err := bs.reclaim(ctx); err != nil {
		log.Warn("some build sandboxes left by a crash could not be reclaimed", "error", err)
	} else if n > 0 {
		log.Info("reclaimed build sandboxes left by a crash", "count", n)
	}
	// The node agent first: the build engine takes its snapshots on ready
	// through it.
	epool, err := newEgressPool(cfg, pool, reg, log)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	sys.OnClose("egress proxy", func() { epool.Proxy().Close() })
	nc := node.Config{
		DataDir: filepath.Join(cfg.DataDir, "node"), Driver: drv, Cgroups: cg, Net: epool,
		Layers: rootfslayers.New(rm, layersRoot), EnvdPath: cfg.EnvdPath, Logger: log, Registry: reg,
		SnapshotRuntime: snapshotRuntime, Volumes: vm,
	}
	cfg.Node.apply(&nc)
	a, err := node.New(ctx, nc)
	if err != nil {
		return nil, fmt.Errorf("node agent: %w", err)
	}
	sys.OnClose("node agent", func() { a.Close() })
	local, err := builder.OpenLocal(builder.LocalConfig{
		DataDir: cfg.DataDir, BaseRootFSTar: cfg.BaseRootFSTar, Runner: bs.runner,
		Snapshotter: a, Logger: sys.Logger.With("component", "templates"), MaxTemplateDiskMB: cfg.MaxTemplateDiskMB,
		Builds: cfg.Builds, StepTimeout: cfg.BuildStepTimeout,
		Transport: (&egress.Dialer{Policy: sys.Egress}).Transport(),
	})
	if err != nil {
		return nil, err
	}
	sys.OnClose("build service", local.Service.Close)
	log.Info("preparing the base template (the first start unpacks or builds its root filesystem)")
	if err := local.Catalog.EnsureBase(ctx, templates.PrintProgress(sys.Out, "# base template: ")); err != nil {
		return nil, fmt.Errorf("base template: %w", err)
	}
	ensureCodeInterpreter(ctx, sys, cfg, local.Catalog, a, log)
	ensureMCPGateway(ctx, sys, cfg, local.Catalog, log)
	if err := local.Service.Recover(ctx); err != nil {
		return nil, fmt.Errorf("template builds: %w", err)
	}
	if err := addTemplateGC(sys, cfg, local, a); err != nil {
		return nil, fmt.Errorf("template gc: %w", err)
	}
	return &Node{Service: a, Templates: local.Catalog, Local: local, Agent: a, Volumes: vm}, nil
}

var _ builder.Snapshotter = (*node.Agent)(nil)
