package builder

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// overlayLayers are the fake node layers with a real overlay mount of the
// template tree as the lower directory, as the product's root filesystem
// layers have: a create or resume over a missing tree fails, and a
// mounted tree shows up in the mount table.
type overlayLayers struct {
	*nodetest.Layers
	dir    string
	mu     sync.Mutex
	mounts map[string]*layer.Mount
}

func newOverlayLayers(t *testing.T) *overlayLayers {
	l := &overlayLayers{Layers: nodetest.NewLayers(), dir: t.TempDir(), mounts: map[string]*layer.Mount{}}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, m := range l.mounts {
			m.Unmount()
		}
	})
	return l
}

func (l *overlayLayers) mount(id, lower string) error {
	scratch := filepath.Join(l.dir, id)
	os.RemoveAll(filepath.Join(scratch, "work"))
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	m, err := layer.MountOverlay([]string{lower}, scratch)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.mounts[id] = m
	l.mu.Unlock()
	return nil
}

func (l *overlayLayers) unmount(id string) {
	l.mu.Lock()
	m := l.mounts[id]
	delete(l.mounts, id)
	l.mu.Unlock()
	if m != nil {
		m.Unmount()
	}
}

func (l *overlayLayers) Create(ctx context.Context, id, lower string, sizeMB int64) (string, error) {
	if err := l.mount(id, lower); err != nil {
		return "", err
	}
	return l.Layers.Create(ctx, id, lower, sizeMB)
}

func (l *overlayLayers) Mount(ctx context.Context, id, lower string) (string, error) {
	if err := l.mount(id, lower); err != nil {
		return "", err
	}
	return l.Layers.Mount(ctx, id, lower)
}

func (l *overlayLayers) Unmount(ctx context.Context, id string) error {
	l.unmount(id)
	return l.Layers.Unmount(ctx, id)
}

func (l *overlayLayers) Destroy(ctx context.Context, id string) error {
	l.unmount(id)
	return l.Layers.Destroy(ctx, id)
}

// gcFixture is a build fixture with a node agent (fake runtime, real
// overlay mounts of template trees) and a collector on a settable clock.
type gcFixture struct {
	*fixture
	agent *node.Agent
	gc    *Collector
	reg   *prometheus.Registry
	mu    sync.Mutex
	now   time.Time
}

const testGrace = 10 * time.Minute

func newGCFixture(t *testing.T, runner Runner) *gcFixture {
	t.Helper()
	f := &gcFixture{fixture: newFixtureWith(t, tinyRootFS(t), runner), now: time.Now(), reg: prometheus.NewRegistry()}
	a, err := node.New(context.Background(), node.Config{
		DataDir: filepath.Join(f.dir, "node"), Driver: fake.New(fake.Config{}), Cgroups: nodetest.NewCgroups(),
		Net: nodetest.NewNet(), Layers: newOverlayLayers(t), Envd: &nodetest.Envd{}, EnvdPath: "/usr/local/bin/envd",
		ReclaimInterval: -1, FreeDisk: func(string) (uint64, error) { return 100 << 30, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	f.agent = a
	f.gc, err = NewCollector(CollectorConfig{
		Builder: f.b, Node: a, Grace: testGrace, Registry: f.reg, Now: f.clock,
		Logger: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *gcFixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *gcFixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

func (f *gcFixture) run(t *testing.T) GCStats {
	t.Helper()
	st, err := f.gc.Run(context.Background())
	if err != nil {
		t.Fatalf("gc: %v", err)
	}
	return st
}

func (f *gcFixture) create(t *testing.T, id string, nt nodeapi.Template) error {
	t.Helper()
	_, err := f.agent.Create(context.Background(), nodeapi.CreateRequest{
		ID: id, Template: nt, Resources: sandbox.Resources{VCPUs: 1, MemoryMB: 256}, EnvdAccessToken: "tok",
	})
	return err
}

// counter reads a registered counter of the collector.
func (f *gcFixture) counter(t *testing.T, name, kind string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{kind=%q} not registered", name, kind)
	return 0
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestGCDeletedTemplate: a deleted template's tree stays while a paused
// sandbox uses it (and the sandbox resumes from it), and goes once the
// sandbox is killed; the template's uploaded files go after the grace
// period.
func TestGCDeletedTemplate(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	f := newGCFixture(t, ChrootRunner{})
	bd, err := f.build(t, "team", "app", Spec{Steps: []Step{{Type: StepRun, Args: []string{"echo hello > /greeting"}}}})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, f.logs(t, bd.ID))
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(make([]byte, 1024)) // an empty tar
	zw.Close()
	if err := f.svc.PutFiles(ctx, bd.TemplateID, "hash1", &gz); err != nil {
		t.Fatal(err)
	}
	uploads := filepath.Join(f.b.cfg.DataDir, "files", bd.TemplateID)
	nt, err := f.cat.Resolve(ctx, "team", "app")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.create(t, "gcpaused1", nt); err != nil {
		t.Fatal(err)
	}
	if _, err := f.agent.Pause(ctx, "gcpaused1", nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatal(err)
	}
	if err := f.cat.Delete(ctx, "team", "app"); err != nil {
		t.Fatal(err)
	}
	buildDir := f.cat.BuildDir(bd.ID)

	if st := f.run(t); st.Waiting != 2 || len(st.Objects) != 0 {
		t.Fatalf("first run after the delete: %+v, want the build and the uploads waiting", st)
	}
	f.advance(testGrace + time.Minute)
	st := f.run(t)
	if !exists(filepath.Join(nt.RootFS, "greeting")) || st.InUse != 1 {
		t.Fatalf("tree of the paused sandbox's deleted template: %+v, exists=%v", st, exists(nt.RootFS))
	}
	if exists(uploads) || st.Objects[GCKindUpload] != 1 {
		t.Errorf("uploads of the deleted template: %+v, exists=%v", st, exists(uploads))
	}
	// The paused sandbox resumes over the same tree.
	if _, err := f.agent.Resume(ctx, "gcpaused1", nodeapi.ResumeRequest{}); err != nil {
		t.Fatalf("resume after the template's delete: %v", err)
	}
	if err := f.agent.Kill(ctx, "gcpaused1", sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	st = f.run(t)
	if exists(buildDir) || st.Objects[GCKindBuild] != 1 || st.Bytes[GCKindBuild] <= 0 {
		t.Fatalf("after the kill: %+v, build dir exists=%v", st, exists(buildDir))
	}
	if left, _ := os.ReadDir(f.cat.TrashDir()); len(left) != 0 {
		t.Errorf("trash left: %v", left)
	}
	if got := f.counter(t, "template_gc_freed_objects_total", GCKindBuild); got != 1 {
		t.Errorf("template_gc_freed_objects_total{kind=build} = %v", got)
	}
	if got := f.counter(t, "template_gc_freed_bytes_total", GCKindBuild); got <= 0 {
		t.Errorf("template_gc_freed_bytes_total{kind=build} = %v", got)
	}
	// The base stays: tagged.
	if base, err := f.cat.Resolve(ctx, "", "base"); err != nil || !exists(filepath.Join(base.RootFS, "bin/sh")) {
		t.Errorf("base template after gc: %v", err)
	}
}

// gatedRunner holds every Exec until gate is closed, and says on started
// that one began.
type gatedRunner struct {
	ChrootRunner
	started chan struct{}
	gate    chan struct{}
	once    sync.Once
}

type gatedSandbox struct {
	BuildSandbox
	r *gatedRunner
}

func (r *gatedRunner) Start(ctx context.Context, req SandboxRequest) (BuildSandbox, error) {
	s, err := r.ChrootRunner.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	return &gatedSandbox{BuildSandbox: s, r: r}, nil
}

func (s *gatedSandbox) Exec(ctx context.Context, p Process) (int, error) {
	s.r.once.Do(func() { close(s.r.started) })
	select {
	case <-s.r.gate:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return s.BuildSandbox.Exec(ctx, p)
}

// TestGCSupersededBase: after the base tar changed, the old base build is
// kept while a build FROM it is in progress (its tree is the lowest layer
// of the build's overlays; the build's own directory is untouched too),
// and freed after the grace period once that build finished; the derived
// template keeps its files (its tree is its own), and the layer cache
// entries stacked on the old tree go with it.
func TestGCSupersededBase(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	r := &gatedRunner{started: make(chan struct{}), gate: make(chan struct{})}
	f := newGCFixture(t, r)
	oldBase, err := f.cat.Resolve(ctx, "", "base")
	if err != nil {
		t.Fatal(err)
	}
	_, derived, err := f.cat.CreateBuild(ctx, templates.CreateRequest{TeamID: "team", Name: "derived"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- f.b.Build(ctx, derived.ID, Spec{TeamID: "team", Steps: []Step{{Type: StepRun, Args: []string{"echo derived > /mark"}}}})
	}()
	select {
	case <-r.started:
	case err := <-done:
		t.Fatalf("build ended early: %v\n%s", err, f.logs(t, derived.ID))
	case <-time.After(2 * time.Minute):
		t.Fatal("the derived build did not start its step within 2 minutes")
	}

	// `make base-rootfs` wrote a new tar; the default tag moves.
	tarPath := filepath.Join(f.dir, "base.tar")
	if err := os.WriteFile(tarPath, withFile(t, tinyRootFS(t), "etc/base-version", "v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	os.Chtimes(tarPath, later, later)
	if err := f.cat.EnsureBase(ctx, nil); err != nil {
		t.Fatal(err)
	}
	newBase, err := f.cat.Resolve(ctx, "", "base")
	if err != nil || newBase.BuildID == oldBase.BuildID {
		t.Fatalf("new base %+v, %v", newBase, err)
	}

	f.run(t)
	f.advance(testGrace + time.Minute)
	st := f.run(t)
	if !exists(filepath.Join(oldBase.RootFS, "bin/sh")) || st.InUse != 1 {
		t.Fatalf("old base while a build FROM it runs: %+v, exists=%v", st, exists(oldBase.RootFS))
	}
	// The build in progress keeps its step's overlay (over the old tree)
	// and its record.
	if ms, err := mountsBelow(f.b.workDir()); err != nil || len(ms) == 0 {
		t.Fatalf("mounts of the build in progress after gc: %v, %v", ms, err)
	}
	if bd, err := f.cat.Build(ctx, derived.ID); err != nil || bd.Status != templates.BuildBuilding {
		t.Fatalf("build in progress after gc: %+v, %v", bd, err)
	}
	if st.Objects[GCKindLayer] != 0 {
		t.Errorf("layer cache collected while a build runs: %+v", st)
	}

	close(r.gate)
	if err := <-done; err != nil {
		t.Fatalf("derived build: %v\n%s", err, f.logs(t, derived.ID))
	}
	bd, err := f.cat.Build(ctx, derived.ID)
	if err != nil {
		t.Fatal(err)
	}
	st = f.run(t)
	if exists(f.cat.BuildDir(oldBase.BuildID)) || st.Objects[GCKindBuild] != 1 {
		t.Fatalf("old base after the derived build finished: %+v, exists=%v", st, exists(f.cat.BuildDir(oldBase.BuildID)))
	}
	if st.Objects[GCKindLayer] == 0 {
		t.Errorf("layer cache entries stacked on the old base tree kept: %+v", st)
	}
	if got := readFile(t, bd.RootFSDir, "mark"); got != "derived\n" {
		t.Errorf("derived template's tree: %q", got)
	}
	if !exists(filepath.Join(bd.RootFSDir, "bin/sh")) {
		t.Error("derived template lost the files it has from the old base")
	}
	if got := readFile(t, newBase.RootFS, "etc/base-version"); got != "v2\n" {
		t.Errorf("new base: %q", got)
	}
	// The derived template still starts sandboxes.
	nt, err := f.cat.Resolve(ctx, "team", "derived")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.create(t, "gcderived1", nt); err != nil {
		t.Fatalf("sandbox of the derived template: %v", err)
	}
}

// TestGCCreateRace: creates from a deleted template's build race with
// collections past the grace period. Whatever the interleaving, a create
// that succeeded has the whole tree under it and the tree stays while the
// sandbox lives; a create that lost finds the tree missing. Odd rounds
// force the worst interleaving: the create starts after the collector
// decided the tree is unused and before it moves it (it must wait for the
// move, then fail).
func TestGCCreateRace(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := context.Background()
	f := newGCFixture(t, ChrootRunner{})
	st := f.cat.Store()
	won, lost := 0, 0
	for i := range 12 {
		name := fmt.Sprintf("race%d", i)
		_, b, err := f.cat.CreateBuild(ctx, templates.CreateRequest{TeamID: "team", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		tree := filepath.Join(f.cat.BuildDir(b.ID), "rootfs")
		for j := range 200 {
			p := filepath.Join(tree, fmt.Sprintf("d%02d", j%10), fmt.Sprintf("f%03d", j))
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, bytes.Repeat([]byte{'x'}, 4096), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.UpdateBuild(ctx, b.ID, func(x *templates.Build) error { x.RootFSDir = tree; return nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := f.cat.FinishBuild(ctx, b.ID, nil); err != nil {
			t.Fatal(err)
		}
		nt, err := f.cat.Resolve(ctx, "team", name)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.cat.Delete(ctx, "team", name); err != nil {
			t.Fatal(err)
		}
		f.run(t) // first seen
		f.advance(testGrace + time.Minute)

		id := fmt.Sprintf("gcrace%02d", i)
		var cerr error
		var wg sync.WaitGroup
		if i%2 == 1 {
			f.gc.heldHook = func() {
				created := make(chan struct{})
				wg.Go(func() {
					defer close(created)
					cerr = f.create(t, id, nt)
				})
				// The create must not get through while the collector
				// holds the node; give it every chance to.
				select {
				case <-created:
				case <-time.After(300 * time.Millisecond):
				}
			}
		} else {
			f.gc.heldHook = nil
			wg.Go(func() { cerr = f.create(t, id, nt) })
		}
		if _, err := f.gc.Run(ctx); err != nil {
			t.Errorf("gc: %v", err)
		}
		wg.Wait()
		if i%2 == 1 && cerr == nil {
			t.Errorf("round %d: a create that began after the collector's decision succeeded", i)
		}
		if cerr == nil {
			won++
			for j := range 200 {
				p := filepath.Join(tree, fmt.Sprintf("d%02d", j%10), fmt.Sprintf("f%03d", j))
				if !exists(p) {
					t.Fatalf("round %d: sandbox created over a tree missing %s", i, p)
				}
			}
			f.run(t)
			if !exists(tree) {
				t.Fatalf("round %d: tree of a live sandbox collected", i)
			}
			if err := f.agent.Kill(ctx, id, sandbox.KillRequest); err != nil {
				t.Fatal(err)
			}
		} else {
			lost++
			if !errors.Is(cerr, os.ErrNotExist) && !strings.Contains(cerr.Error(), "no such file") {
				t.Errorf("round %d: create lost with %v, want the tree missing", i, cerr)
			}
		}
		f.run(t)
		if exists(f.cat.BuildDir(b.ID)) {
			t.Fatalf("round %d: tree left after the sandbox ended", i)
		}
	}
	t.Logf("creates that won the race: %d, lost: %d", won, lost)
}
