package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/runc"
	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/rootfslayers"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// realNode builds the node agent over runsc or runc with the host's
// cgroups, network slots and root filesystem layers, and the template
// catalog, whose base template it makes sure of first (the first start
// unpacks BaseRootFSTar, or builds it with mmdebstrap).
func realNode(ctx context.Context, cfg Config, reg prometheus.Registerer) (node.Service, apiserver.TemplateResolver, closer, error) {
	log := cfg.Logger.With("component", "node")
	cgRoot := cfg.CgroupRoot
	if cgRoot == "" {
		cgRoot = "warren"
	}
	var drv driver.Driver
	switch cfg.Driver {
	case "runsc":
		d, err := runsc.New(runsc.Config{Path: cfg.RunscPath, StateDir: filepath.Join(cfg.DataDir, "runsc"), CgroupRoot: "/" + cgRoot, Logger: log})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("runsc driver: %w", err)
		}
		drv = d
	case "runc":
		d, err := runc.New(runc.Config{Path: cfg.RuncPath, StateDir: filepath.Join(cfg.DataDir, "runc"), CgroupRoot: "/" + cgRoot, Logger: log})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("runc driver: %w", err)
		}
		drv = d
	default:
		return nil, nil, nil, fmt.Errorf("driver %q: %w", cfg.Driver, errdefs.ErrInvalid)
	}
	if _, err := os.Stat(cfg.EnvdPath); err != nil {
		return nil, nil, nil, fmt.Errorf("envd binary %q (build it with make build): %w", cfg.EnvdPath, errdefs.ErrUnavailable)
	}
	cg, err := cgroup.NewManager(cgRoot, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cgroups: %w", err)
	}
	pool, err := netslot.NewPool(cfg.Net, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("network slots: %w", err)
	}
	layersRoot := filepath.Join(cfg.DataDir, "layers")
	rm, err := rootfs.New(rootfs.Config{DataRoot: layersRoot}, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("root filesystems: %w", err)
	}
	cat, err := templates.New(templates.Config{
		DataDir: filepath.Join(cfg.DataDir, "templates"), BaseRootFSTar: cfg.BaseRootFSTar,
		Logger: cfg.Logger.With("component", "templates"),
	})
	if err != nil {
		return nil, nil, nil, err
	}
	log.Info("preparing the base template (the first start unpacks or builds its root filesystem)")
	if err := cat.EnsureBase(ctx, nil); err != nil {
		return nil, nil, nil, fmt.Errorf("base template: %w", err)
	}
	a, err := node.New(ctx, node.Config{
		DataDir: filepath.Join(cfg.DataDir, "node"), Driver: drv, Cgroups: cg, Net: pool,
		Layers: rootfslayers.New(rm, layersRoot), EnvdPath: cfg.EnvdPath, Logger: log, Registry: reg,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("node agent: %w", err)
	}
	return a, cat, func() { a.Close() }, nil
}
