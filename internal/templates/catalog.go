package templates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Config configures a Catalog.
type Config struct {
	// DataDir holds the catalog's files: the file store (store/), unpacked
	// build root filesystems (builds/<buildID>/rootfs) and the base tar.
	// It may be empty with a Store: a catalog of records only (that of
	// `warren api`, whose builds' files are on its nodes).
	DataDir string
	// Store, when set, replaces the file store under DataDir/store.
	Store Store
	// Logger receives the catalog's log; nil discards it.
	Logger *slog.Logger

	// BaseRootFSTar, when set and present, is a pre-built root filesystem
	// tar for the base template (e.g. var/base-rootfs.tar from `make
	// base-rootfs`); EnsureBase then skips mmdebstrap.
	BaseRootFSTar string
	// Mmdebstrap is the mmdebstrap binary; "mmdebstrap" by default.
	Mmdebstrap string
	// DebianMirror is the mirror mmdebstrap uses; Debian's by default.
	DebianMirror string

	// UnpackRootFS unpacks an operator's root filesystem tar (the base
	// tar, a system template's tar) from r into the existing directory
	// dir, passing the bytes of file content written so far to progress
	// when it is set. The node's composition root sets it to the one tar
	// package's unpack (internal/node/layer, device nodes kept: the tar
	// is the operator's own); a catalog without it (of records only, as
	// `warren api` has) refuses to unpack (errdefs.ErrUnsupported). It is
	// passed in so that the catalog, which the control plane links,
	// links no node code.
	UnpackRootFS func(ctx context.Context, r io.Reader, dir string, progress func(written int64)) error

	// Now returns the current time; time.Now by default.
	Now func() time.Time
}

// Catalog is the template catalog of one Warren installation.
type Catalog struct {
	cfg    Config
	store  Store
	log    *slog.Logger
	now    func() time.Time
	baseMu sync.Mutex
	// unpackMu serialises unpacking of build root filesystems.
	unpackMu sync.Mutex
}

// New opens the catalog in cfg.DataDir.
func New(cfg Config) (*Catalog, error) {
	if cfg.DataDir == "" && cfg.Store == nil {
		return nil, fmt.Errorf("template catalog: no data directory: %w", errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Mmdebstrap == "" {
		cfg.Mmdebstrap = "mmdebstrap"
	}
	if cfg.DebianMirror == "" {
		cfg.DebianMirror = "http://deb.debian.org/debian"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	st := cfg.Store
	if st == nil {
		fs, err := NewFileStore(filepath.Join(cfg.DataDir, "store"))
		if err != nil {
			return nil, err
		}
		st = fs
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, "builds"), 0o755); err != nil {
			return nil, fmt.Errorf("template catalog: %w", err)
		}
	}
	return &Catalog{cfg: cfg, store: st, log: cfg.Logger, now: cfg.Now}, nil
}

// Store returns the catalog's store (for the build engine's logs).
func (c *Catalog) Store() Store { return c.store }

// BuildDir is the directory that holds a build's files on this machine; its
// root filesystem goes to BuildDir(id)/rootfs.
func (c *Catalog) BuildDir(buildID string) string {
	return filepath.Join(c.cfg.DataDir, "builds", filepath.Base(buildID))
}

// visible reports whether team may use t.
func visible(t *Template, teamID string) bool {
	return t.Public || t.TeamID == "" || t.TeamID == teamID
}

// Find returns the template with ID or name ref, as seen by team: a
// template ID the team may use (its own, a system one or a public one);
// else a bare name is the team's own template of that name, then the
// operator's system template of that name (reserved names only ever
// resolve to the system template); "team/name" names another team's
// template, found only when it is public (or the team is the caller's).
// Another team's template is never found under a bare name, so a name
// one team takes cannot capture another team's creates.
func (c *Catalog) Find(ctx context.Context, teamID, ref string) (*Template, error) {
	notFound := errdefs.Publicf(errdefs.ErrNotFound, "template %q", ref)
	t, err := c.store.GetTemplate(ctx, ref)
	switch {
	case err == nil && visible(t, teamID):
		return t, nil
	case err == nil:
		return nil, notFound
	case !errdefs.IsNotFound(err):
		return nil, err
	}
	if ns, name, scoped := strings.Cut(ref, "/"); scoped {
		if ns == "" || name == "" {
			return nil, notFound
		}
		t, err := c.store.TemplateByAlias(ctx, ns, name)
		switch {
		case errdefs.IsNotFound(err):
			return nil, notFound
		case err != nil:
			return nil, err
		case ns == teamID || t.Public:
			return t, nil
		}
		return nil, notFound
	}
	if teamID != "" && !Reserved(ref) {
		t, err := c.store.TemplateByAlias(ctx, teamID, ref)
		if err == nil {
			return t, nil
		}
		if !errdefs.IsNotFound(err) {
			return nil, err
		}
	}
	t, err = c.store.TemplateByAlias(ctx, "", ref)
	if errdefs.IsNotFound(err) {
		return nil, notFound
	}
	return t, err
}

// TeamName checks a name (without tag) a team gives a template and
// returns it without the team's own namespace: "team/name" is allowed
// only as the caller's team ID, and reserved names are the operator's.
func TeamName(teamID, alias string) (string, error) {
	if err := ValidateAlias(alias); err != nil {
		return "", err
	}
	if ns, name, scoped := strings.Cut(alias, "/"); scoped {
		if ns != teamID || teamID == "" || name == "" || strings.Contains(name, "/") {
			return "", errdefs.Publicf(errdefs.ErrInvalid, "template name %q: a namespace must be your team's ID (%q)", alias, teamID)
		}
		alias = name
	}
	if teamID != "" && Reserved(alias) {
		return "", errdefs.Publicf(errdefs.ErrForbidden, "template name %q is reserved for the operator's templates", alias)
	}
	return alias, nil
}

// Lookup resolves "idOrAlias[:tag]" for team to the template and its build
// behind the tag. The build must be ready.
func (c *Catalog) Lookup(ctx context.Context, teamID, ref string) (*Template, *Build, error) {
	name, tag := ParseRef(ref)
	t, err := c.Find(ctx, teamID, name)
	if err != nil {
		return nil, nil, err
	}
	tg, ok := t.Tags[tag]
	if !ok {
		if tag == DefaultTag {
			return nil, nil, errdefs.Publicf(errdefs.ErrNotFound, "template %q has no ready build", name)
		}
		return nil, nil, errdefs.Publicf(errdefs.ErrNotFound, "template %q: tag %q", name, tag)
	}
	b, err := c.store.GetBuild(ctx, tg.BuildID)
	if err != nil {
		return nil, nil, fmt.Errorf("template %q: %w", ref, err)
	}
	if b.Status != BuildReady {
		return nil, nil, errdefs.Publicf(errdefs.ErrConflict, "template %q: build %s is %s", ref, b.ID, b.Status)
	}
	return t, b, nil
}

// Resolve returns what a node needs to start a sandbox of ref
// ("idOrAlias[:tag]") for team, the root filesystem unpacked on this
// machine.
func (c *Catalog) Resolve(ctx context.Context, teamID, ref string) (nodeapi.Template, error) {
	t, b, err := c.Lookup(ctx, teamID, ref)
	if err != nil {
		return nodeapi.Template{}, err
	}
	if err := checkSandboxSnapshot(b); err != nil {
		return nodeapi.Template{}, fmt.Errorf("template %q: %w", ref, err)
	}
	dir, err := c.ensureRootFS(ctx, b)
	if err != nil {
		return nodeapi.Template{}, fmt.Errorf("template %q: %w", ref, err)
	}
	nt := b.NodeTemplate()
	nt.ID = t.ID
	nt.RootFS = dir
	return nt, nil
}

// NodeTemplate is the node's view of a ready build.
func (b *Build) NodeTemplate() nodeapi.Template {
	user, wd := b.User, b.Workdir
	if user == "" {
		user = DefaultUser
	}
	if wd == "" {
		wd = DefaultWorkdir
	}
	return nodeapi.Template{
		ID:          b.TemplateID,
		BuildID:     b.ID,
		RootFS:      b.RootFSDir,
		Env:         MergeEnv(b.Env, nil, nil),
		User:        user,
		Workdir:     wd,
		StartCmd:    b.StartCmd,
		SnapshotDir: b.SnapshotDir,
		Resources:   sandbox.Resources{VCPUs: b.CPUCount, MemoryMB: b.MemoryMB, DiskMB: b.DiskMB},
	}
}

// checkSandboxSnapshot refuses a sandbox snapshot's build whose snapshot
// is not on this machine: its sandboxes never start cold (they would lack
// the sandbox's files).
func checkSandboxSnapshot(b *Build) error {
	if b.SandboxSnapshot != nil && (b.SnapshotDir == "" || !dirExists(b.SnapshotDir)) {
		return fmt.Errorf("build %s is a sandbox's snapshot, which is not on this machine: %w", b.ID, errdefs.ErrUnavailable)
	}
	return nil
}

// ensureRootFS returns the build's unpacked root filesystem, unpacking its
// tar first when the tree is missing on this machine.
func (c *Catalog) ensureRootFS(ctx context.Context, b *Build) (string, error) {
	dir := b.RootFSDir
	if dir == "" {
		dir = filepath.Join(c.BuildDir(b.ID), "rootfs")
	}
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return dir, nil
	}
	if b.RootFSTar == "" {
		return "", fmt.Errorf("build %s: root filesystem %s is missing: %w", b.ID, dir, errdefs.ErrUnavailable)
	}
	c.unpackMu.Lock()
	defer c.unpackMu.Unlock()
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return dir, nil
	}
	if _, err := c.unpackTar(ctx, b.RootFSTar, dir, b.RootFSTarFingerprint, nil); err != nil {
		return "", fmt.Errorf("build %s: %w", b.ID, err)
	}
	return dir, nil
}

// unpackTar unpacks tarPath into dir atomically: into a temporary sibling
// first, renamed into place when complete. It returns the tar's
// fingerprint, hashed on the way; when want is set and the tar's content
// differs from it, nothing is renamed into place and the error is
// ErrUnavailable (the build's tar was replaced since).
func (c *Catalog) unpackTar(ctx context.Context, tarPath, dir string, want *TarFingerprint, progress func(done, total int64)) (*TarFingerprint, error) {
	if c.cfg.UnpackRootFS == nil {
		return nil, fmt.Errorf("root filesystem tar %s: this catalog unpacks no tar: %w", tarPath, errdefs.ErrUnsupported)
	}
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, fmt.Errorf("root filesystem tar: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("root filesystem tar: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	tmp := dir + ".unpacking"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return nil, err
	}
	var cb func(int64)
	if progress != nil {
		cb = func(n int64) { progress(n, fi.Size()) }
	}
	h := sha256.New()
	tee := io.TeeReader(f, h)
	err = c.cfg.UnpackRootFS(ctx, tee, tmp, cb)
	if err == nil {
		_, err = io.Copy(io.Discard, tee) // the tar's end, for the hash
	}
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	fp := &TarFingerprint{Size: fi.Size(), ModTime: fi.ModTime(), SHA256: hex.EncodeToString(h.Sum(nil))}
	if want != nil && want.SHA256 != fp.SHA256 {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("root filesystem tar %s changed since the build was made (sha256 %s, was %s); its tree is gone and cannot be made again: %w",
			tarPath, fp.SHA256, want.SHA256, errdefs.ErrUnavailable)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return fp, nil
}

// List returns the templates team owns, or every template when teamID is
// empty, oldest first.
func (c *Catalog) List(ctx context.Context, teamID string) ([]*Template, error) {
	all, err := c.store.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	if teamID == "" {
		return all, nil
	}
	out := all[:0]
	for _, t := range all {
		if t.TeamID == teamID {
			out = append(out, t)
		}
	}
	return out, nil
}

// TeamDiskBytes is the disk the builds of team's templates recorded
// (Build.DiskBytes), their team's template storage.
func (c *Catalog) TeamDiskBytes(ctx context.Context, teamID string) (int64, error) {
	own, err := c.List(ctx, teamID)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range own {
		if t.TeamID != teamID {
			continue
		}
		builds, err := c.Builds(ctx, t.ID)
		if err != nil {
			return 0, err
		}
		for _, b := range builds {
			n += b.DiskBytes
		}
	}
	return n, nil
}

// Builds returns a template's builds, oldest first.
func (c *Catalog) Builds(ctx context.Context, templateID string) ([]*Build, error) {
	return c.store.ListBuilds(ctx, templateID)
}

// Build returns one build.
func (c *Catalog) Build(ctx context.Context, buildID string) (*Build, error) {
	return c.store.GetBuild(ctx, buildID)
}

// Owned returns the template with ID or name ref if team owns it (the
// operator, teamID "", owns the system templates): what may be inspected
// (its builds, their status and logs, tags, uploads) and changed. A
// template the team may only use is refused: another team's public one
// as not found, the same answer as for one that does not exist (public
// means usable, not inspectable); a system template as forbidden (every
// team knows the operator's names).
func (c *Catalog) Owned(ctx context.Context, teamID, ref string) (*Template, error) {
	t, err := c.Find(ctx, teamID, ref)
	if err != nil {
		return nil, err
	}
	switch {
	case t.TeamID == teamID:
		return t, nil
	case t.TeamID == "":
		return nil, errdefs.Publicf(errdefs.ErrForbidden, "template %q is a system template", ref)
	}
	return nil, errdefs.Publicf(errdefs.ErrNotFound, "template %q", ref)
}

// Delete removes a template of team and its builds; their files go later
// (garbage collection).
func (c *Catalog) Delete(ctx context.Context, teamID, idOrAlias string) error {
	t, err := c.Owned(ctx, teamID, idOrAlias)
	if err != nil {
		return err
	}
	if err := c.store.DeleteTemplate(ctx, t.ID); err != nil {
		return err
	}
	// The builds' files stay where sandboxes of the template (running,
	// paused: a resume mounts the tree again from the same path) expect
	// them; the garbage collector (PlanGC, builder.Collector) removes them
	// once nothing uses them.
	return nil
}

// DeleteTeamTemplates removes every template team owns (the team is
// being deleted); files go later, as with Delete.
func (c *Catalog) DeleteTeamTemplates(ctx context.Context, teamID string) error {
	if teamID == "" {
		return fmt.Errorf("delete team templates: no team: %w", errdefs.ErrInvalid)
	}
	own, err := c.List(ctx, teamID)
	if err != nil {
		return err
	}
	for _, t := range own {
		if err := c.store.DeleteTemplate(ctx, t.ID); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("template %q: %w", t.ID, err)
		}
	}
	return nil
}

// PurgeDeleted removes the files that older versions of Delete moved to
// DataDir/deleted, for which inUse (nil: none is) says no sandbox still
// uses them. The garbage collector (builder.Collector) takes care of them
// now; this stays for tools that have no node.
func (c *Catalog) PurgeDeleted(ctx context.Context, inUse func(buildID string) bool) error {
	trash := filepath.Join(c.cfg.DataDir, "deleted")
	entries, err := os.ReadDir(trash)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("purge deleted builds: %w", err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if inUse != nil && inUse(e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(trash, e.Name())); err != nil {
			return fmt.Errorf("purge deleted build %s: %w", e.Name(), err)
		}
	}
	return nil
}

// SetPublic makes a template of team public or private.
func (c *Catalog) SetPublic(ctx context.Context, teamID, idOrAlias string, public bool) (*Template, error) {
	t, err := c.Owned(ctx, teamID, idOrAlias)
	if err != nil {
		return nil, err
	}
	return c.store.UpdateTemplate(ctx, t.ID, func(t *Template) error {
		t.Public = public
		t.UpdatedAt = c.now()
		return nil
	})
}

// CreateRequest asks for a new build of a template (POST /v3/templates).
type CreateRequest struct {
	TeamID string
	// Name is "alias" or "alias:tag"; an existing alias of the same team
	// gets a new build, a new one a new template.
	Name string
	// Tags are assigned to the build when it is ready, besides the tag in
	// Name; none means DefaultTag.
	Tags     []string
	CPUCount *int
	MemoryMB *int64
	DiskMB   int64
	Limits   Limits
}

// CreateBuild makes a waiting build (and its template when new) for req.
func (c *Catalog) CreateBuild(ctx context.Context, req CreateRequest) (*Template, *Build, error) {
	alias, tag := ParseRef(req.Name)
	alias, err := TeamName(req.TeamID, alias)
	if err != nil {
		return nil, nil, err
	}
	cpu, mem, err := ValidateResources(req.CPUCount, req.MemoryMB, req.Limits)
	if err != nil {
		return nil, nil, err
	}
	disk := req.DiskMB
	if disk <= 0 {
		disk = DefaultDiskMB
	}
	tags := []string{tag}
	for _, tg := range req.Tags {
		if !slices.Contains(tags, tg) && tg != "" {
			tags = append(tags, tg)
		}
	}
	now := c.now()
	t, err := c.store.TemplateByAlias(ctx, req.TeamID, alias)
	switch {
	case errdefs.IsNotFound(err):
		t = &Template{
			ID: NewTemplateID(), TeamID: req.TeamID, Aliases: []string{alias}, Tags: map[string]Tag{},
			CPUCount: cpu, MemoryMB: mem, DiskMB: disk, CreatedAt: now, UpdatedAt: now,
		}
		if err := c.store.CreateTemplate(ctx, t); err != nil {
			return nil, nil, err
		}
	case err != nil:
		return nil, nil, err
	default:
		t, err = c.store.UpdateTemplate(ctx, t.ID, func(t *Template) error {
			t.CPUCount, t.MemoryMB, t.DiskMB, t.UpdatedAt = cpu, mem, disk, now
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	b := &Build{
		ID: NewBuildID(), TemplateID: t.ID, Status: BuildWaiting, Tags: tags,
		User: DefaultUser, Workdir: DefaultWorkdir,
		CPUCount: cpu, MemoryMB: mem, DiskMB: disk, CreatedAt: now, UpdatedAt: now,
	}
	if err := c.store.CreateBuild(ctx, b); err != nil {
		return nil, nil, err
	}
	return t, b, nil
}

// UpdateBuild changes a build that is not finished (the build engine's
// progress: status, metadata as steps run).
func (c *Catalog) UpdateBuild(ctx context.Context, buildID string, fn func(*Build) error) (*Build, error) {
	return c.store.UpdateBuild(ctx, buildID, func(b *Build) error {
		if b.Status == BuildReady || b.Status == BuildError {
			return errdefs.Publicf(errdefs.ErrConflict, "build %s is already %s", b.ID, b.Status)
		}
		if err := fn(b); err != nil {
			return err
		}
		b.UpdatedAt = c.now()
		return nil
	})
}

// FinishBuild marks a build ready, or failed when reason is set. A ready
// build takes its tags (and DefaultTag when the template has none yet) in
// the same store change, so that no crash leaves a ready build whose
// template still points elsewhere.
func (c *Catalog) FinishBuild(ctx context.Context, buildID string, reason *Reason) (*Build, error) {
	finished := c.now()
	if reason != nil {
		return c.UpdateBuild(ctx, buildID, func(b *Build) error {
			b.FinishedAt = finished
			b.Status, b.Reason = BuildError, reason
			return nil
		})
	}
	var tags []string
	return c.store.FinishBuild(ctx, buildID, func(b *Build) error {
		if b.Status == BuildReady || b.Status == BuildError {
			return errdefs.Publicf(errdefs.ErrConflict, "build %s is already %s", b.ID, b.Status)
		}
		b.Status = BuildReady
		b.FinishedAt, b.UpdatedAt = finished, finished
		tags = b.Tags
		return nil
	}, func(t *Template) error {
		if t.Tags == nil {
			t.Tags = map[string]Tag{}
		}
		if _, ok := t.Tags[DefaultTag]; !ok && !slices.Contains(tags, DefaultTag) {
			tags = append(slices.Clone(tags), DefaultTag)
		}
		for _, tg := range tags {
			t.Tags[tg] = Tag{BuildID: buildID, CreatedAt: finished}
		}
		t.UpdatedAt = finished
		return nil
	})
}

// AssignTags points tags at the build behind target ("alias:tag" or
// "alias", meaning its default tag) and returns that build's ID.
func (c *Catalog) AssignTags(ctx context.Context, teamID, target string, tags []string) (string, error) {
	name, tag := ParseRef(target)
	t, err := c.Owned(ctx, teamID, name)
	if err != nil {
		return "", err
	}
	src, ok := t.Tags[tag]
	if !ok {
		return "", errdefs.Publicf(errdefs.ErrNotFound, "template %q: tag %q", name, tag)
	}
	_, err = c.store.UpdateTemplate(ctx, t.ID, func(t *Template) error {
		now := c.now()
		for _, tg := range tags {
			if tg == "" {
				return errdefs.Publicf(errdefs.ErrInvalid, "empty tag")
			}
			t.Tags[tg] = Tag{BuildID: src.BuildID, CreatedAt: now}
		}
		t.UpdatedAt = now
		return nil
	})
	return src.BuildID, err
}

// DeleteTags removes tags from a template of team. Removing DefaultTag is
// allowed: the bare alias then resolves to nothing until a build is tagged
// again.
func (c *Catalog) DeleteTags(ctx context.Context, teamID, name string, tags []string) error {
	t, err := c.Owned(ctx, teamID, name)
	if err != nil {
		return err
	}
	for _, tg := range tags {
		if _, ok := t.Tags[tg]; !ok {
			return errdefs.Publicf(errdefs.ErrNotFound, "template %q: tag %q", name, tg)
		}
	}
	_, err = c.store.UpdateTemplate(ctx, t.ID, func(t *Template) error {
		for _, tg := range tags {
			delete(t.Tags, tg)
		}
		t.UpdatedAt = c.now()
		return nil
	})
	return err
}

// TagInfo is one tag as listed.
type TagInfo struct {
	Tag       string
	BuildID   string
	CreatedAt time.Time
}

// ListTags returns the tags of a template team owns, oldest first.
func (c *Catalog) ListTags(ctx context.Context, teamID, idOrAlias string) ([]TagInfo, error) {
	t, err := c.Owned(ctx, teamID, idOrAlias)
	if err != nil {
		return nil, err
	}
	out := make([]TagInfo, 0, len(t.Tags))
	for name, tg := range t.Tags {
		out = append(out, TagInfo{Tag: name, BuildID: tg.BuildID, CreatedAt: tg.CreatedAt})
	}
	slices.SortFunc(out, func(a, b TagInfo) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		if a.Tag < b.Tag {
			return -1
		}
		return 1
	})
	return out, nil
}

// RemovePartial removes what an interrupted unpack left in the build
// directories (builds/<id>/rootfs.unpacking: the tree is unpacked there and
// renamed into place when complete) and an interrupted mmdebstrap run's
// tar, and returns how many it removed. Call it at start, before templates
// are resolved.
func (c *Catalog) RemovePartial(ctx context.Context) (int, error) {
	c.baseMu.Lock()
	defer c.baseMu.Unlock()
	c.unpackMu.Lock()
	defer c.unpackMu.Unlock()
	builds := filepath.Join(c.cfg.DataDir, "builds")
	entries, err := os.ReadDir(builds)
	if err != nil {
		return 0, fmt.Errorf("build directories: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		p := filepath.Join(builds, e.Name(), "rootfs.unpacking")
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("partial root filesystem %s: %w", p, err))
			continue
		}
		n++
		c.log.Info("partial root filesystem removed", "build_id", e.Name(), "path", p)
	}
	// A base tar mmdebstrap was writing (bootstrapBase renames it into
	// place when complete).
	tmp := filepath.Join(c.cfg.DataDir, "base", "rootfs.tar.tmp")
	if err := os.Remove(tmp); err == nil {
		n++
		c.log.Info("partial base root filesystem tar removed", "path", tmp)
	} else if !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("partial base tar: %w", err))
	}
	return n, errors.Join(errs...)
}
