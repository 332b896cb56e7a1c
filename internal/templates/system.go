package templates

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// SystemTemplate is a template the installation makes itself at start,
// beside base, from a root filesystem tar of Debian packages (the
// operator-owned `code-interpreter-v1`): public, owned by no team, with a
// start and a ready command so that the build's snapshot on ready holds
// its server warm.
type SystemTemplate struct {
	// ID is the template's ID and alias.
	ID string
	// RootFSTar is the root filesystem tar the build unpacks.
	RootFSTar string
	// StartCmd and ReadyCmd are the build's start and ready commands.
	StartCmd, ReadyCmd string
	// Env is added to the default PATH.
	Env      map[string]string
	CPUCount int
	MemoryMB int64
	// Snapshot, when set, takes the snapshot on ready of a new build into
	// dir (the node agent's Snapshot) before the build is marked ready; a
	// failure leaves the build usable by cold start. A ready build without
	// its snapshot is then replaced at the next start.
	Snapshot func(ctx context.Context, t nodeapi.Template, readyCmd, dir string) error
}

// EnsureSystemTemplate makes sure st exists with a ready build made from
// st.RootFSTar and st's commands, and returns that build. Like the base
// template's, the build is reused while its tar is unchanged (size and
// modification time, else SHA-256) and its commands are the same;
// otherwise a new build takes the default tag and the old one stays for
// what was made from it, as is a build without its snapshot on ready when
// st.Snapshot is set.
func (c *Catalog) EnsureSystemTemplate(ctx context.Context, st SystemTemplate, progress func(Progress)) (*Build, error) {
	if progress == nil {
		progress = func(Progress) {}
	}
	if st.ID == "" || st.ID == BaseID || !fileExists(st.RootFSTar) {
		return nil, fmt.Errorf("system template %q: root filesystem tar %q: %w", st.ID, st.RootFSTar, errdefs.ErrInvalid)
	}
	c.baseMu.Lock()
	defer c.baseMu.Unlock()
	cur, err := c.currentSystem(ctx, st.ID)
	if err != nil {
		return nil, fmt.Errorf("system template %s: %w", st.ID, err)
	}
	if cur != nil && cur.StartCmd == st.StartCmd && cur.ReadyCmd == st.ReadyCmd && (st.Snapshot == nil || dirExists(cur.SnapshotDir)) {
		changed, err := c.baseTarChanged(ctx, cur, st.RootFSTar, progress)
		if err != nil {
			return nil, fmt.Errorf("system template %s: %w", st.ID, err)
		}
		if !changed {
			progress(Progress{Phase: "ready", Message: st.ID + " template ready (build " + cur.ID + ")"})
			return cur, nil
		}
	}
	if cur != nil {
		c.log.Info("system template changed, making a new build", "template_id", st.ID, "old_build_id", cur.ID, "tar", st.RootFSTar)
	}

	now := c.now()
	if _, err := c.store.GetTemplate(ctx, st.ID); errdefs.IsNotFound(err) {
		t := &Template{
			ID: st.ID, Aliases: []string{st.ID}, Public: true, Tags: map[string]Tag{},
			CPUCount: st.CPUCount, MemoryMB: st.MemoryMB, DiskMB: DefaultDiskMB,
			CreatedAt: now, UpdatedAt: now,
		}
		if err := c.store.CreateTemplate(ctx, t); err != nil {
			return nil, fmt.Errorf("system template %s: %w", st.ID, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("system template %s: %w", st.ID, err)
	}
	env := map[string]string{"PATH": DefaultPath}
	maps.Copy(env, st.Env)
	b := &Build{
		ID: NewBuildID(), TemplateID: st.ID, Status: BuildBuilding, Tags: []string{DefaultTag},
		RootFSTar: st.RootFSTar, Env: env, User: DefaultUser, Workdir: DefaultWorkdir,
		StartCmd: st.StartCmd, ReadyCmd: st.ReadyCmd,
		CPUCount: st.CPUCount, MemoryMB: st.MemoryMB, DiskMB: DefaultDiskMB,
		CreatedAt: now, UpdatedAt: now,
	}
	b.RootFSDir = filepath.Join(c.BuildDir(b.ID), "rootfs")
	if err := c.store.CreateBuild(ctx, b); err != nil {
		return nil, fmt.Errorf("system template %s: %w", st.ID, err)
	}
	progress(Progress{Phase: "unpack", Message: "unpacking " + st.RootFSTar})
	fp, err := c.unpackTar(ctx, st.RootFSTar, b.RootFSDir, nil, func(done, total int64) {
		progress(Progress{Phase: "unpack", Done: done, Total: total})
	})
	if err == nil {
		_, err = c.UpdateBuild(ctx, b.ID, func(x *Build) error { x.RootFSTarFingerprint = fp; return nil })
	}
	if err != nil {
		if _, ferr := c.FinishBuild(context.WithoutCancel(ctx), b.ID, &Reason{Message: err.Error(), Step: "unpack"}); ferr != nil {
			c.log.Warn("record failed system template build", "template_id", st.ID, "build_id", b.ID, "error", ferr)
		}
		return nil, fmt.Errorf("system template %s: %w", st.ID, err)
	}
	if st.Snapshot != nil {
		dir := filepath.Join(c.BuildDir(b.ID), "snapshot")
		progress(Progress{Phase: "snapshot", Message: "taking the snapshot on ready of " + st.ID})
		if err := st.Snapshot(ctx, b.NodeTemplate(), b.ReadyCmd, dir); err != nil {
			os.RemoveAll(dir)
			c.log.Warn("system template without snapshot on ready: its sandboxes cold-start", "template_id", st.ID, "build_id", b.ID, "error", err)
		} else if _, err := c.UpdateBuild(ctx, b.ID, func(x *Build) error { x.SnapshotDir = dir; return nil }); err != nil {
			return nil, fmt.Errorf("system template %s: %w", st.ID, err)
		}
	}
	b, err = c.FinishBuild(ctx, b.ID, nil)
	if err != nil {
		return nil, fmt.Errorf("system template %s: %w", st.ID, err)
	}
	c.log.Info("system template ready", "template_id", st.ID, "build_id", b.ID, "rootfs", b.RootFSDir, "tar", st.RootFSTar, "sha256", fp.SHA256)
	progress(Progress{Phase: "ready", Message: st.ID + " template ready (build " + b.ID + ")"})
	return b, nil
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return p != "" && err == nil && fi.IsDir()
}
