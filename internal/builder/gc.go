package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/templates"
)

// Garbage collection of template files.
//
// What is freed, and when (templates.PlanGC has the catalog's rules):
//
//   - build directories (a root filesystem tree and the snapshot on ready,
//     with the snapshot's saved layer) of superseded, deleted and failed
//     builds, once the collector has seen them unneeded for Grace and no
//     sandbox of the node (any state, warm pools and the agent's internal
//     ones included) and no build in progress uses them;
//   - the uploaded COPY files (files/<templateID>) of deleted templates,
//     after Grace, unless a build of the template still runs;
//   - layer cache entries (layers/<key>) that can never be hit again (a
//     layer they stack is gone: a collected template tree), and entries
//     not used for CacheMaxAge; both only while no build runs.
//
// The race between "the collector finds a tree unused" and "a create starts
// using it" is closed by a check-and-move under the node agent's lock
// (nodeapi.Agent.HoldTemplates): every sandbox is registered under that lock
// before its tree is mounted or its snapshot read, and the collector moves
// a directory out of its place (an atomic rename into the trash) while
// holding it, only when no registered sandbox uses it. A sandbox
// registered earlier keeps the directory; one registered later finds the
// path missing and its create fails cleanly — never on a half-removed
// tree. Such a create must have resolved the build before it stopped
// being tagged (or before its template was deleted) and waited longer than
// Grace since: the grace period is what lets a create that resolved a
// build just before still start. Removal (slow) happens after the lock is
// released, in the trash.

// Defaults of the collector.
const (
	// DefaultGCGrace is how long a build stays after the collector first
	// finds it unneeded (untagged, deleted, failed).
	DefaultGCGrace = 15 * time.Minute
	// DefaultGCInterval is the time between two collections in serve.
	DefaultGCInterval = time.Hour
	// DefaultCacheMaxAge is how long an unused layer cache entry stays.
	DefaultCacheMaxAge = 7 * 24 * time.Hour
)

// TemplateUsers is what the collector asks the node: the node agent
// implements it.
type TemplateUsers interface {
	// HoldTemplates calls fn with the template files sandboxes use, while
	// no sandbox can start using another one.
	HoldTemplates(fn func(inUse []nodeapi.TemplateUse))
	// DeleteSnapshot deletes a template snapshot with its saved layer.
	DeleteSnapshot(ctx context.Context, dir string) error
}

// CollectorConfig configures a Collector.
type CollectorConfig struct {
	Builder *Builder
	// Node tells which template files sandboxes use; nil means a data
	// directory without a node (no sandbox can use anything).
	Node TemplateUsers
	// Grace is how long an unneeded build or upload is kept
	// (DefaultGCGrace when 0).
	Grace time.Duration
	// CacheMaxAge bounds the age of unused layer cache entries
	// (DefaultCacheMaxAge when 0; negative keeps them whatever their age).
	CacheMaxAge time.Duration
	// Service, when set, has each run first fail the builds that waited
	// longer than WaitingMaxAge (DefaultWaitingMaxAge when 0) to be
	// started (Service.ExpireWaiting).
	Service       *Service
	WaitingMaxAge time.Duration
	// Registry, when set, gets template_gc_freed_bytes_total and
	// template_gc_freed_objects_total.
	Registry prometheus.Registerer
	Logger   *slog.Logger
	// Now is the clock (time.Now by default).
	Now func() time.Time
}

// Collector frees the disk space of template files nothing needs.
type Collector struct {
	cfg   CollectorConfig
	b     *Builder
	cat   *templates.Catalog
	log   *slog.Logger
	bytes *prometheus.CounterVec
	objs  *prometheus.CounterVec
	// mu serialises collections.
	mu sync.Mutex
	// heldHook, when set (tests), runs while the node's templates are
	// held, after the decision and before the moves.
	heldHook func()
}

// Kinds of freed objects (the kind label).
const (
	GCKindBuild  = "build"  // a build directory: root filesystem tree, snapshot
	GCKindLayer  = "layer"  // a layer cache entry
	GCKindUpload = "upload" // a deleted template's uploaded files
	GCKindSaved  = "snapshot_layer"
)

// NewCollector returns a Collector; it registers its metrics.
func NewCollector(cfg CollectorConfig) (*Collector, error) {
	if cfg.Builder == nil {
		return nil, fmt.Errorf("template gc: no builder: %w", errdefs.ErrInvalid)
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGCGrace
	}
	if cfg.CacheMaxAge == 0 {
		cfg.CacheMaxAge = DefaultCacheMaxAge
	}
	if cfg.WaitingMaxAge <= 0 {
		cfg.WaitingMaxAge = DefaultWaitingMaxAge
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Collector{
		cfg: cfg, b: cfg.Builder, cat: cfg.Builder.cat, log: cfg.Logger,
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "template_gc_freed_bytes_total",
			Help: "Disk space freed by the template garbage collector (build trees and snapshots, layer cache entries, uploaded files), by kind.",
		}, []string{"kind"}),
		objs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "template_gc_freed_objects_total",
			Help: "Objects removed by the template garbage collector, by kind (build, layer, upload, snapshot_layer).",
		}, []string{"kind"}),
	}
	for _, k := range []string{GCKindBuild, GCKindLayer, GCKindUpload, GCKindSaved} {
		c.bytes.WithLabelValues(k)
		c.objs.WithLabelValues(k)
	}
	if cfg.Registry != nil {
		for _, m := range []prometheus.Collector{c.bytes, c.objs} {
			if err := cfg.Registry.Register(m); err != nil {
				return nil, fmt.Errorf("template gc metrics: %w", err)
			}
		}
	}
	return c, nil
}

// GCStats is what one collection freed.
type GCStats struct {
	// Objects and Bytes count by kind (GCKind*).
	Objects map[string]int
	Bytes   map[string]int64
	// Waiting counts unneeded builds and uploads still in their grace
	// period; InUse those a sandbox or a build in progress uses.
	Waiting, InUse int
}

func (s *GCStats) add(kind string, bytes int64) {
	s.Objects[kind]++
	s.Bytes[kind] += bytes
}

// Run collects once. Errors removing one object are collected and the
// rest goes on.
func (c *Collector) Run(ctx context.Context) (GCStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := GCStats{Objects: map[string]int{}, Bytes: map[string]int64{}}
	defer func() {
		for k, n := range st.Objects {
			c.objs.WithLabelValues(k).Add(float64(n))
			c.bytes.WithLabelValues(k).Add(float64(st.Bytes[k]))
		}
	}()
	var errs []error
	now := c.cfg.Now()
	seen, err := c.loadSeen()
	if err != nil {
		c.log.Warn("template gc: grace state unreadable, starting the grace periods again", "error", err)
		seen = map[string]time.Time{}
	}
	// Builds nobody started go first: a waiting build keeps its
	// template's uploads.
	if c.cfg.Service != nil {
		if _, err := c.cfg.Service.ExpireWaiting(ctx, now.Add(-c.cfg.WaitingMaxAge)); err != nil {
			errs = append(errs, err)
		}
	}
	// What an earlier run moved to the trash and could not remove.
	c.emptyTrash(ctx, &st, &errs)

	plan, err := c.cat.PlanGC(ctx)
	if err != nil {
		return st, err
	}
	next := map[string]time.Time{}
	due := func(key string) bool {
		first, ok := seen[key]
		if !ok || first.After(now) {
			first = now
		}
		next[key] = first
		if now.Sub(first) < c.cfg.Grace {
			st.Waiting++
			return false
		}
		return true
	}
	var dueBuilds []templates.GCCandidate
	for _, cd := range plan.Candidates {
		if due(cd.Dir) {
			dueBuilds = append(dueBuilds, cd)
		}
	}
	moved := c.moveUnused(dueBuilds, &st, &errs)
	for _, m := range moved {
		delete(next, m.cand.Dir)
		c.removeBuild(ctx, m, &st, &errs)
	}

	for _, id := range c.collectUploads(ctx, plan, due, &st, &errs) {
		delete(next, "files/"+id)
	}
	if err := c.saveSeen(next); err != nil {
		errs = append(errs, err)
	}
	c.collectCache(ctx, now, &st, &errs)
	return st, errors.Join(errs...)
}

type movedBuild struct {
	cand  templates.GCCandidate
	trash string
}

// moveUnused moves the due build directories that no sandbox and no build
// in progress uses into the trash, under the node's lock (see the race
// note above).
func (c *Collector) moveUnused(due []templates.GCCandidate, st *GCStats, errs *[]error) []movedBuild {
	if len(due) == 0 {
		return nil
	}
	var moved []movedBuild
	hold := func(inUse []nodeapi.TemplateUse) {
		used := map[string]bool{}
		for _, u := range inUse {
			// By path (a tree or snapshot in a build directory) and by
			// build ID (directories older versions moved elsewhere).
			for _, p := range []string{u.RootFS, u.SnapshotDir} {
				if id, ok := c.cat.BuildOf(p); ok {
					used[id] = true
				}
			}
			if u.BuildID != "" {
				used[u.BuildID] = true
			}
		}
		trees, _ := c.b.pinned()
		for p := range trees {
			if id, ok := c.cat.BuildOf(p); ok {
				used[id] = true
			}
		}
		if err := os.MkdirAll(c.cat.TrashDir(), 0o700); err != nil {
			*errs = append(*errs, fmt.Errorf("template gc: %w", err))
			return
		}
		if c.heldHook != nil {
			c.heldHook()
		}
		for _, cd := range due {
			if used[cd.BuildID] {
				st.InUse++
				continue
			}
			dst := filepath.Join(c.cat.TrashDir(), cd.BuildID+"."+templates.NewTemplateID()[:8])
			if err := os.Rename(cd.Dir, dst); err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					*errs = append(*errs, fmt.Errorf("template gc: build %s: %w", cd.BuildID, err))
				}
				continue
			}
			moved = append(moved, movedBuild{cand: cd, trash: dst})
		}
	}
	if c.cfg.Node != nil {
		c.cfg.Node.HoldTemplates(hold)
	} else {
		hold(nil)
	}
	return moved
}

// removeBuild deletes a build directory moved to the trash: its
// snapshot's saved layer first (outside the directory), then the files.
func (c *Collector) removeBuild(ctx context.Context, m movedBuild, st *GCStats, errs *[]error) {
	log := c.log.With("template_id", m.cand.TemplateID, "build_id", m.cand.BuildID, "reason", string(m.cand.Reason))
	snap := filepath.Join(m.trash, "snapshot")
	if c.cfg.Node != nil {
		if _, err := os.Stat(filepath.Join(snap, "warren-snapshot.json")); err == nil {
			if err := c.cfg.Node.DeleteSnapshot(ctx, snap); err != nil {
				*errs = append(*errs, fmt.Errorf("template gc: build %s: %w", m.cand.BuildID, err))
				log.Warn("template gc: snapshot's saved layer not deleted; the build's files wait in the trash", "error", err)
				return
			}
			st.add(GCKindSaved, 0)
		}
	}
	n, err := c.remove(m.trash)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("template gc: build %s: %w", m.cand.BuildID, err))
		return
	}
	st.add(GCKindBuild, n)
	log.Info("template build files freed", "bytes", n, "path", m.cand.Dir)
}

// remove measures what removing dir frees, checks nothing is mounted
// below it, and removes it.
func (c *Collector) remove(dir string) (int64, error) {
	if mounts, err := mountsBelow(dir); err != nil || len(mounts) > 0 {
		return 0, fmt.Errorf("%s kept: mounts below it %v: %w", dir, mounts, errors.Join(err, errdefs.ErrConflict))
	}
	n := freedBytes(dir)
	if err := os.RemoveAll(dir); err != nil {
		return 0, err
	}
	return n, nil
}

// emptyTrash removes what an earlier run left in the trash: only unused
// directories are ever moved there.
func (c *Collector) emptyTrash(ctx context.Context, st *GCStats, errs *[]error) {
	entries, err := os.ReadDir(c.cat.TrashDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			return
		}
		p := filepath.Join(c.cat.TrashDir(), e.Name())
		id, _, _ := strings.Cut(e.Name(), ".")
		if strings.HasPrefix(id, "files-") {
			n, err := c.remove(p)
			if err != nil {
				*errs = append(*errs, fmt.Errorf("template gc: %w", err))
				continue
			}
			st.add(GCKindUpload, n)
			c.log.Info("uploaded files of deleted template freed", "template_id", strings.TrimPrefix(id, "files-"), "bytes", n)
			continue
		}
		c.removeBuild(ctx, movedBuild{cand: templates.GCCandidate{Dir: p, BuildID: id, Reason: "trash"}, trash: p}, st, errs)
	}
}

// collectUploads removes the uploaded files of templates that no longer
// exist, after the grace period, unless a build of theirs still runs.
func (c *Collector) collectUploads(ctx context.Context, plan *templates.GCPlan, due func(string) bool, st *GCStats, errs *[]error) (freed []string) {
	root := filepath.Join(c.b.cfg.DataDir, "files")
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	_, building := c.b.pinned()
	for _, e := range entries {
		id := e.Name()
		if ctx.Err() != nil || !e.IsDir() || plan.Templates[id] {
			continue
		}
		if !due("files/" + id) {
			continue
		}
		if building[id] {
			st.InUse++
			continue
		}
		// Moved first: an upload that arrives now fails instead of
		// landing in a half-removed directory.
		if err := os.MkdirAll(c.cat.TrashDir(), 0o700); err != nil {
			*errs = append(*errs, err)
			return freed
		}
		dst := filepath.Join(c.cat.TrashDir(), "files-"+id+"."+templates.NewTemplateID()[:8])
		if err := os.Rename(filepath.Join(root, id), dst); err != nil {
			*errs = append(*errs, fmt.Errorf("template gc: uploads of %s: %w", id, err))
			continue
		}
		n, err := c.remove(dst)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("template gc: uploads of %s: %w", id, err))
			continue
		}
		st.add(GCKindUpload, n)
		freed = append(freed, id)
		c.log.Info("uploaded files of deleted template freed", "template_id", id, "bytes", n)
	}
	return freed
}

// collectCache removes layer cache entries that can never be hit (a layer
// they stack is gone) and those unused for CacheMaxAge, when no build runs
// (it skips otherwise: a build waiting for it would block new builds).
func (c *Collector) collectCache(ctx context.Context, now time.Time, st *GCStats, errs *[]error) {
	if !c.b.cacheMu.TryLock() {
		c.log.Debug("template gc: builds are running, layer cache left for the next run")
		return
	}
	defer c.b.cacheMu.Unlock()
	dir := filepath.Join(c.b.cfg.DataDir, "layers")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			return
		}
		p := filepath.Join(dir, e.Name())
		reason := cacheEntryDead(p)
		if reason == "" && c.cfg.CacheMaxAge > 0 && now.Sub(lastUse(p)) > c.cfg.CacheMaxAge {
			reason = "unused"
		}
		if reason == "" {
			continue
		}
		n, err := c.remove(p)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("template gc: layer %s: %w", e.Name(), err))
			continue
		}
		st.add(GCKindLayer, n)
		c.log.Info("layer cache entry freed", "key", e.Name(), "reason", reason, "bytes", n)
	}
}

// cacheEntryDead tells why the cache entry in dir can never be hit again
// ("" when it can): cacheLoad needs every layer it stacks.
func cacheEntryDead(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return "" // an image pull (no state), or being written
	}
	var s state
	if json.Unmarshal(data, &s) != nil {
		return ""
	}
	for _, l := range s.Layers {
		if _, err := os.Stat(l); errors.Is(err, os.ErrNotExist) {
			return "layer gone"
		}
	}
	return ""
}

// lastUse is the newest modification time of an entry's state and diff
// (cacheLoad and base touch them at each hit).
func lastUse(dir string) time.Time {
	var last time.Time
	for _, f := range []string{"state.json", "diff"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
	}
	return last
}

// seenFile keeps when the collector first found each unneeded build or
// upload, so that a restart does not start the grace periods again.
func (c *Collector) seenFile() string { return filepath.Join(c.b.cfg.DataDir, "gc-seen.json") }

func (c *Collector) loadSeen() (map[string]time.Time, error) {
	m := map[string]time.Time{}
	data, err := os.ReadFile(c.seenFile())
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(data, &m)
}

func (c *Collector) saveSeen(m map[string]time.Time) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	f, err := c.b.scratchFile("gc-seen-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), c.seenFile())
}

// Loop runs a collection now and then every interval until ctx ends,
// logging what each freed.
func (c *Collector) Loop(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultGCInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		start := time.Now()
		st, err := c.Run(ctx)
		var objs int
		var bytes int64
		for k, n := range st.Objects {
			objs += n
			bytes += st.Bytes[k]
		}
		if objs > 0 || err != nil {
			c.log.Info("template gc", "objects_freed", objs, "bytes_freed", bytes, "waiting", st.Waiting, "in_use", st.InUse,
				"duration", time.Since(start).Round(time.Millisecond), "error", err)
		} else {
			c.log.Debug("template gc: nothing to free", "waiting", st.Waiting, "in_use", st.InUse)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
