package templates

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// A node of `warren api` keeps, in its own catalog, mirrors of the
// templates and builds of the control plane's catalog it builds or holds
// (internal/nodebuild): the template without its aliases (names are the
// control plane's to resolve; a node resolves by build ID) and the build.

// Mirror stores t (without aliases or tags) and b in the catalog: t
// replaces a mirror of the same ID, b is created unless it exists.
func (c *Catalog) Mirror(ctx context.Context, t *Template, b *Build) error {
	if err := CheckID("template", t.ID); err != nil {
		return err
	}
	if err := CheckID("build", b.ID); err != nil {
		return err
	}
	if b.TemplateID != t.ID {
		return fmt.Errorf("build %q is of template %q, not %q: %w", b.ID, b.TemplateID, t.ID, errdefs.ErrInvalid)
	}
	if err := c.MirrorTemplate(ctx, t); err != nil {
		return err
	}
	if err := c.store.CreateBuild(ctx, b); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("mirror build %q: %w", b.ID, err)
	}
	return nil
}

// MirrorTemplate stores t (without aliases or tags) in the catalog,
// replacing a mirror of the same ID.
func (c *Catalog) MirrorTemplate(ctx context.Context, t *Template) error {
	if err := CheckID("template", t.ID); err != nil {
		return err
	}
	m := *t
	m.Aliases, m.Tags = nil, map[string]Tag{}
	_, err := c.store.UpdateTemplate(ctx, t.ID, func(old *Template) error {
		tags := old.Tags
		*old = m
		old.Tags = tags
		return nil
	})
	if errdefs.IsNotFound(err) {
		err = c.store.CreateTemplate(ctx, &m)
	}
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("mirror template %q: %w", t.ID, err)
	}
	return nil
}

// ResolveBuild returns what a node needs to start a sandbox of the ready
// build buildID for team, the root filesystem unpacked on this machine.
// A build of a template team may not use is ErrNotFound, as for Find.
func (c *Catalog) ResolveBuild(ctx context.Context, teamID, buildID string) (nodeapi.Template, error) {
	b, err := c.store.GetBuild(ctx, buildID)
	if err != nil {
		return nodeapi.Template{}, err
	}
	t, err := c.store.GetTemplate(ctx, b.TemplateID)
	if err != nil || !visible(t, teamID) {
		return nodeapi.Template{}, fmt.Errorf("build %q: %w", buildID, errdefs.ErrNotFound)
	}
	if b.Status != BuildReady {
		return nodeapi.Template{}, fmt.Errorf("build %q is %s: %w", buildID, b.Status, errdefs.ErrConflict)
	}
	if err := checkSandboxSnapshot(b); err != nil {
		return nodeapi.Template{}, err
	}
	dir, err := c.ensureRootFS(ctx, b)
	if err != nil {
		return nodeapi.Template{}, err
	}
	nt := b.NodeTemplate()
	nt.RootFS = dir
	return nt, nil
}

// HeldBuilds returns the IDs of the ready builds whose root filesystem is
// on this machine (what a node tells placement it holds).
func (c *Catalog) HeldBuilds(ctx context.Context) ([]string, error) {
	all, err := c.store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range all {
		builds, err := c.store.ListBuilds(ctx, t.ID)
		if err != nil {
			return nil, err
		}
		for _, b := range builds {
			if b.Status != BuildReady {
				continue
			}
			dir := b.RootFSDir
			if dir == "" {
				dir = filepath.Join(c.BuildDir(b.ID), "rootfs")
			}
			if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
				out = append(out, b.ID)
			}
		}
	}
	return out, nil
}

// EnsureBaseRecord makes sure a catalog of records only (that of `warren
// api`, whose nodes each prepare base themselves) has the base template:
// public, with one ready build whose ID is BaseID, which a node resolves
// to its own base build (a build ID equal to its template's ID names a
// template each node holds itself). Replicas may race: one record wins.
func (c *Catalog) EnsureBaseRecord(ctx context.Context) error {
	now := c.now()
	t := &Template{
		ID: BaseID, Aliases: []string{BaseID}, Public: true,
		Tags:     map[string]Tag{DefaultTag: {BuildID: BaseID, CreatedAt: now}},
		CPUCount: DefaultCPU, MemoryMB: DefaultMemoryMB, DiskMB: DefaultDiskMB, CreatedAt: now, UpdatedAt: now,
	}
	if err := c.store.CreateTemplate(ctx, t); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("base template record: %w", err)
	}
	b := &Build{
		ID: BaseID, TemplateID: BaseID, Status: BuildReady, Tags: []string{DefaultTag},
		Env: map[string]string{"PATH": DefaultPath}, User: DefaultUser, Workdir: DefaultWorkdir,
		CPUCount: DefaultCPU, MemoryMB: DefaultMemoryMB, DiskMB: DefaultDiskMB, CreatedAt: now, UpdatedAt: now, FinishedAt: now,
	}
	if err := c.store.CreateBuild(ctx, b); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("base template record: %w", err)
	}
	return nil
}
