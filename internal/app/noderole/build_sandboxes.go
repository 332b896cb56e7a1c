package noderole

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/warren-sandbox/warren/internal/builder/driverrun"
	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/runc"
	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
)

// buildSandboxes are where template builds run their steps (RUN, the
// start and the ready command): sandboxes of the node's runtime (gVisor by
// default), each with a network slot from the node's own pool, so the
// egress rules of every sandbox hold for builds too (no host, no other
// sandbox, no private range; outbound internet for package installs).
//
// They have a runtime state dir and a cgroup root of their own: the node
// agent's leak reclaim destroys every container of its driver and every
// sbx-* cgroup under its root that belongs to no sandbox it knows, and a
// build in progress is none of them. Their slots come from the same pool
// instance as the node's, which keeps live slots out of its reclaim; a
// slot a crash left behind is reclaimed by the node agent's start-up pass.
type buildSandboxes struct {
	runner  driverrun.Runner
	drv     driver.Driver
	cgroups cgroup.Manager
	bundles string
	log     *slog.Logger
}

// buildCgroupRoot is the cgroup root of build sandboxes beside the node's.
func buildCgroupRoot(nodeRoot string) string { return nodeRoot + "-build" }

// newBuildSandboxes makes the build runner over a driver of cfg.Driver's
// kind (state under DataDir/builder/<driver>) and slots of pool.
func newBuildSandboxes(cfg Host, cgRoot string, pool netslot.Pool, log *slog.Logger) (*buildSandboxes, error) {
	log = log.With("component", "build-sandboxes")
	root := buildCgroupRoot(cgRoot)
	stateDir := filepath.Join(cfg.DataDir, "builder", cfg.Driver)
	var drv driver.Driver
	switch cfg.Driver {
	case "runsc":
		d, err := runsc.New(runsc.Config{Path: cfg.RunscPath, StateDir: stateDir, CgroupRoot: "/" + root, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("build sandboxes: runsc driver: %w", err)
		}
		drv = d
	case "runc":
		d, err := runc.New(runc.Config{Path: cfg.RuncPath, StateDir: stateDir, CgroupRoot: "/" + root, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("build sandboxes: runc driver: %w", err)
		}
		drv = d
	default:
		return nil, fmt.Errorf("build sandboxes: driver %q: %w", cfg.Driver, errdefs.ErrInvalid)
	}
	cg, err := cgroup.NewManager(root, log)
	if err != nil {
		return nil, fmt.Errorf("build sandboxes: cgroups: %w", err)
	}
	bundles := filepath.Join(cfg.DataDir, "builder", "bundles")
	if err := os.MkdirAll(bundles, 0o700); err != nil {
		return nil, fmt.Errorf("build sandboxes: %w", err)
	}
	b := &buildSandboxes{drv: drv, cgroups: cg, bundles: bundles, log: log}
	b.runner = driverrun.Runner{
		Driver: drv, Init: cfg.EnvdPath,
		// envd is only the init here: every step is an exec of the
		// runtime, nothing connects to it.
		InitArgs:   []string{"-listen", "127.0.0.1", "-no-port-forward", "-log-level", "warn"},
		BundleRoot: bundles,
		ResolvConf: node.DefaultResolvConf,
		NetNS: func(ctx context.Context, id string) (string, func(), error) {
			slot, err := pool.Acquire(ctx, id, netslot.Policy{Internet: true})
			if err != nil {
				return "", nil, err
			}
			release := func() {
				if err := pool.Release(context.Background(), slot); err != nil {
					log.Warn("release build sandbox network; the node's leak reclaim will retry", "sandbox_id", id, "error", err)
				}
			}
			return slot.NetNSPath, release, nil
		},
		Log: slogWriter{log: log},
	}
	return b, nil
}

// reclaim ends what a crash of Warren left of build sandboxes. No build
// survives a restart (the build service marks interrupted builds failed),
// so every container of the build driver and every cgroup under the build
// root goes. It runs before the node agent starts, whose start-up pass then
// reclaims the network slots they held.
func (b *buildSandboxes) reclaim(ctx context.Context) (int, error) {
	var errs []error
	n := 0
	ids, err := b.drv.List(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("list build containers: %w", err))
	}
	for _, id := range ids {
		_ = b.drv.Kill(ctx, id)
		if err := b.drv.Delete(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("build container %q: %w", id, err))
			continue
		}
		b.log.Info("reclaimed build sandbox left by a crash", "sandbox_id", id)
		n++
	}
	names, err := b.cgroups.List(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("list build cgroups: %w", err))
	}
	for _, name := range names {
		cg, err := b.cgroups.Open(ctx, name)
		if errdefs.IsNotFound(err) {
			continue
		}
		if err == nil {
			err = cg.KillAll(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("build cgroup %q: %w", name, err))
			continue
		}
		b.log.Info("reclaimed build cgroup left by a crash", "cgroup", name)
		n++
	}
	// The bundles of build sandboxes (their OCI configs) go with them.
	ents, err := os.ReadDir(b.bundles)
	if err != nil {
		errs = append(errs, fmt.Errorf("build bundles: %w", err))
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(b.bundles, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("build bundle %q: %w", e.Name(), err))
		}
	}
	return n, errors.Join(errs...)
}

// slogWriter logs each line a runtime writes as a warning.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimSpace(string(p)), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			w.log.Warn("build sandbox runtime", "output", line)
		}
	}
	return len(p), nil
}
