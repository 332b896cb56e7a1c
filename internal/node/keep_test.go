package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// preparingDriver is the fake driver with driver.RestorePreparer, as the
// runsc driver has: PrepareRestore remembers the spec, RestorePrepared
// restores the image with it.
type preparingDriver struct {
	*fake.Driver
	mu       sync.Mutex
	prepared map[string]driver.Spec
	restores atomic.Int32 // RestorePrepared calls that restored
	// hold, when set, runs at the start of every PrepareRestore (a test
	// can hold a preparation there).
	hold func()
	// prepareErr, when set, is what PrepareRestore fails with.
	prepareErr error
}

var _ driver.RestorePreparer = (*preparingDriver)(nil)

func (d *preparingDriver) PrepareRestore(ctx context.Context, spec driver.Spec) error {
	if d.hold != nil {
		d.hold()
	}
	if d.prepareErr != nil {
		return d.prepareErr
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.prepared[spec.ID]; ok {
		return fmt.Errorf("sandbox %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	d.prepared[spec.ID] = spec
	return nil
}

func (d *preparingDriver) RestorePrepared(ctx context.Context, id, dir string) error {
	d.mu.Lock()
	spec, ok := d.prepared[id]
	delete(d.prepared, id)
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err := d.Restore(ctx, spec, dir); err != nil {
		return err
	}
	d.restores.Add(1)
	return nil
}

func (d *preparingDriver) Delete(ctx context.Context, id string) error {
	d.mu.Lock()
	delete(d.prepared, id)
	d.mu.Unlock()
	return d.Driver.Delete(ctx, id)
}

func (d *preparingDriver) isPrepared(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.prepared[id]
	return ok
}

// rearmNet is the in-memory network with netslot's Rearm.
type rearmNet struct {
	*nodetest.Net
	rearms atomic.Int32
	// holdRelease, when set, runs at the start of every Release.
	holdRelease func()
}

func (n *rearmNet) Release(ctx context.Context, s *netslot.Slot) error {
	if n.holdRelease != nil {
		n.holdRelease()
	}
	return n.Net.Release(ctx, s)
}

func (n *rearmNet) Rearm(ctx context.Context, s *netslot.Slot) error {
	if !slices.Contains(n.Live(), s.SandboxID) {
		return fmt.Errorf("slot of %q: %w", s.SandboxID, errdefs.ErrNotFound)
	}
	n.rearms.Add(1)
	return nil
}

// keepEnv is an env whose driver prepares restores and whose network
// rearms slots, so that paused sandboxes keep their host objects.
func keepEnv(t *testing.T, tune func(*node.Config)) (*env, *preparingDriver, *rearmNet) {
	e := newEnv(t, fake.Config{})
	d := &preparingDriver{Driver: e.fake, prepared: map[string]driver.Spec{}}
	n := &rearmNet{Net: e.net}
	e.drv = d
	e.tune = func(c *node.Config) {
		c.Net = n
		c.FreeMemory = func() (uint64, error) { return 8 << 30, nil }
		if tune != nil {
			tune(c)
		}
	}
	return e, d, n
}

func (e *env) pauseMem(a *node.Agent, id string) {
	e.t.Helper()
	if _, err := a.Pause(context.Background(), id, nodeapi.PauseRequest{Memory: true}); err != nil {
		e.t.Fatalf("pause %s: %v", id, err)
	}
}

func kept(t *testing.T, a *node.Agent, id string) bool {
	t.Helper()
	k, err := a.HostObjectsKept(id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// holds reports whether id's slot and cgroup are live.
func (e *env) holds(id string) (slot, cgroup bool) {
	_, cgroup = e.cg.Get(sandbox.HostName(id))
	return slices.Contains(e.net.Live(), id), cgroup
}

func TestKeepPausedResumesIntoPrepared(t *testing.T) {
	e, d, n := keepEnv(t, nil)
	a := e.start()
	sb := e.create(a, "k1")
	e.pauseMem(a, "k1")
	if !kept(t, a, "k1") {
		t.Fatal("a paused sandbox does not keep its host objects")
	}
	if slot, cg := e.holds("k1"); !slot || !cg {
		t.Errorf("kept slot %v, cgroup %v; want both", slot, cg)
	}
	if !d.isPrepared("k1") || n.rearms.Load() != 1 {
		t.Errorf("prepared %v, slot rearmed %d times; want prepared, once", d.isPrepared("k1"), n.rearms.Load())
	}
	r, err := a.Resume(context.Background(), "k1", nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.restores.Load() != 1 {
		t.Errorf("restores into the prepared container: %d, want 1", d.restores.Load())
	}
	if r.Address != sb.Address || r.State != sandbox.StateRunning {
		t.Errorf("resumed %+v, want running at %s", r, sb.Address)
	}
	if err := a.Kill(context.Background(), "k1", sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	e.assertNoHostObjects("k1")
}

func TestKeepPausedKillReleases(t *testing.T) {
	e, d, _ := keepEnv(t, nil)
	a := e.start()
	e.create(a, "k2")
	e.pauseMem(a, "k2")
	if err := a.Kill(context.Background(), "k2", sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	e.assertNoHostObjects("k2")
	if d.isPrepared("k2") {
		t.Error("prepared container left after kill")
	}
}

func TestKeepPausedCountEvictsOldest(t *testing.T) {
	e, d, _ := keepEnv(t, func(c *node.Config) { c.KeepPaused = 2 })
	a := e.start()
	ids := []string{"c1", "c2", "c3"}
	for _, id := range ids {
		e.create(a, id)
	}
	for _, id := range ids {
		e.pauseMem(a, id)
		if !kept(t, a, id) {
			t.Fatalf("%s: not kept right after its pause", id)
		}
	}
	waitFor(t, "the oldest kept sandbox's release", func() bool { return !kept(t, a, "c1") })
	if slot, cg := e.holds("c1"); slot || cg || d.isPrepared("c1") {
		t.Errorf("evicted c1 holds slot %v, cgroup %v, prepared %v", slot, cg, d.isPrepared("c1"))
	}
	for _, id := range ids[1:] {
		if !kept(t, a, id) {
			t.Errorf("%s: evicted, want kept (among the 2 newest)", id)
		}
	}
	if _, err := a.Resume(context.Background(), "c1", nodeapi.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	if d.restores.Load() != 0 {
		t.Errorf("the evicted sandbox resumed into a prepared container")
	}
}

func TestKeepPausedTimeBound(t *testing.T) {
	e, _, _ := keepEnv(t, func(c *node.Config) { c.KeepPausedFor = 20 * time.Millisecond })
	a := e.start()
	e.create(a, "t1")
	e.pauseMem(a, "t1")
	waitFor(t, "the keep's end", func() bool { return !kept(t, a, "t1") })
	if slot, cg := e.holds("t1"); slot || cg {
		t.Errorf("after its time: slot %v, cgroup %v", slot, cg)
	}
	if _, err := a.Resume(context.Background(), "t1", nodeapi.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
}

// lowMemoryEnv is a keepEnv whose host has memory to spare until low is
// set.
func lowMemoryEnv(t *testing.T) (*env, *atomic.Bool) {
	low := new(atomic.Bool)
	e, _, _ := keepEnv(t, func(c *node.Config) {
		c.FreeMemory = func() (uint64, error) {
			if low.Load() {
				return 1 << 20, nil
			}
			return 8 << 30, nil
		}
	})
	return e, low
}

func TestKeepPausedNoneWhenMemoryLow(t *testing.T) {
	e, low := lowMemoryEnv(t)
	a := e.start()
	e.create(a, "m1")
	e.create(a, "m2")
	e.pauseMem(a, "m1")
	low.Store(true)
	e.pauseMem(a, "m2")
	if kept(t, a, "m2") {
		t.Error("kept while memory is low")
	}
	waitFor(t, "the release of the sandbox kept before memory ran low", func() bool { return !kept(t, a, "m1") })
}

// Memory running low between pauses releases what paused sandboxes kept
// without waiting for the next pause.
func TestKeepPausedReleasedWhenMemoryRunsLow(t *testing.T) {
	e, low := lowMemoryEnv(t)
	a := e.start()
	e.create(a, "w1")
	e.pauseMem(a, "w1")
	if !kept(t, a, "w1") {
		t.Fatal("not kept with memory to spare")
	}
	low.Store(true)
	waitFor(t, "the release once memory ran low", func() bool { return !kept(t, a, "w1") })
	if slot, cg := e.holds("w1"); slot || cg {
		t.Errorf("after memory ran low: slot %v, cgroup %v", slot, cg)
	}
	if _, err := a.Resume(context.Background(), "w1", nodeapi.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
}

func TestKeepPausedReleasedAtClose(t *testing.T) {
	e, d, _ := keepEnv(t, nil)
	a, err := node.New(context.Background(), e.config())
	if err != nil {
		t.Fatal(err)
	}
	e.create(a, "z1")
	e.pauseMem(a, "z1")
	a.Close()
	if slot, cg := e.holds("z1"); slot || cg || d.isPrepared("z1") {
		t.Errorf("after Close: slot %v, cgroup %v, prepared %v", slot, cg, d.isPrepared("z1"))
	}
	a2 := e.start()
	got, err := a2.Get(context.Background(), "z1")
	if err != nil || got.State != sandbox.StatePaused || !got.PausedWithMemory {
		t.Fatalf("after Close and a new agent: %+v, %v", got, err)
	}
	if _, err := a2.Resume(context.Background(), "z1", nodeapi.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
}

// TestKeepOffWithoutPreparer: a driver without RestorePreparer (the
// fake as it is) releases everything at the pause.
func TestKeepOffWithoutPreparer(t *testing.T) {
	e := newEnv(t, fake.Config{})
	a := e.start()
	e.create(a, "o1")
	e.pauseMem(a, "o1")
	if kept(t, a, "o1") {
		t.Error("kept without a RestorePreparer")
	}
	if slot, cg := e.holds("o1"); slot || cg {
		t.Errorf("paused without keeping: slot %v, cgroup %v", slot, cg)
	}
}

// waitFor waits (bounded, generously) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (d *preparingDriver) List(ctx context.Context) ([]string, error) {
	ids, err := d.Driver.List(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.prepared {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, err
}

// TestKeepPausedRecoveredAfterCrash: an agent that starts on the data
// dir of one that did not close reclaims a kept sandbox's slot, cgroup
// and prepared container, and keeps it paused with its image.
func TestKeepPausedRecoveredAfterCrash(t *testing.T) {
	e, d, _ := keepEnv(t, nil)
	a1 := e.start() // closed only at the end: as if it had died
	e.create(a1, "r1")
	e.pauseMem(a1, "r1")
	if !kept(t, a1, "r1") || !d.isPrepared("r1") {
		t.Fatal("not kept and prepared before the crash")
	}
	a2 := e.start()
	got, err := a2.Get(context.Background(), "r1")
	if err != nil || got.State != sandbox.StatePaused || !got.PausedWithMemory {
		t.Fatalf("after the crash: %+v, %v; want paused with memory", got, err)
	}
	if kept(t, a2, "r1") {
		t.Error("the new agent counts the sandbox as keeping its objects")
	}
	if slot, cg := e.holds("r1"); slot || cg || d.isPrepared("r1") {
		t.Errorf("after recovery: slot %v, cgroup %v, prepared %v; want all reclaimed", slot, cg, d.isPrepared("r1"))
	}
	// The record no longer names the reclaimed objects (a kill would
	// release a slot the new pool may have handed to another sandbox).
	b, err := os.ReadFile(filepath.Join(e.dir, "sandboxes", sandbox.HostName("r1"), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"slot", "cgroup", "rootfs"} {
		if _, ok := rec[k]; ok {
			t.Errorf("state record after recovery still has %s: %v", k, rec[k])
		}
	}
	if _, err := a2.Resume(context.Background(), "r1", nodeapi.ResumeRequest{}); err != nil {
		t.Fatalf("resume after recovery: %v", err)
	}
	if d.restores.Load() != 0 {
		t.Error("resumed into a prepared container after recovery")
	}
}

// TestKeepPausedReleasedWhenDraining: the heartbeat's reply says the
// control plane drains the node. Paused sandboxes give back the host
// objects they kept (a draining node takes no resume), and a pause while
// draining keeps none; undrained, the node keeps them again. The released
// sandboxes still resume, the slow way.
func TestKeepPausedReleasedWhenDraining(t *testing.T) {
	ctx := context.Background()
	e, d, _ := keepEnv(t, nil)
	a := e.start()
	for _, id := range []string{"d1", "d2", "d3", "d4"} {
		e.create(a, id)
	}
	e.pauseMem(a, "d1")
	e.pauseMem(a, "d2")
	if !kept(t, a, "d1") || !kept(t, a, "d2") {
		t.Fatal("paused sandboxes do not keep their host objects")
	}
	if err := nodereg.Apply(ctx, a, &nodereg.Reply{Status: store.NodeDraining}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the kept objects' release at the drain", func() bool { return !kept(t, a, "d1") && !kept(t, a, "d2") })
	for _, id := range []string{"d1", "d2"} {
		if slot, cg := e.holds(id); slot || cg || d.isPrepared(id) {
			t.Errorf("%s after the drain holds slot %v, cgroup %v, prepared %v", id, slot, cg, d.isPrepared(id))
		}
	}
	e.pauseMem(a, "d3")
	if kept(t, a, "d3") {
		t.Error("a pause while the node drains kept the host objects")
	}
	// Replies keep saying draining: nothing changes; then the drain ends.
	if err := nodereg.Apply(ctx, a, &nodereg.Reply{Status: store.NodeDraining}); err != nil {
		t.Fatal(err)
	}
	if err := nodereg.Apply(ctx, a, &nodereg.Reply{Status: store.NodeReady}); err != nil {
		t.Fatal(err)
	}
	e.pauseMem(a, "d4")
	if !kept(t, a, "d4") {
		t.Error("after the drain ended, a pause does not keep the host objects")
	}
	if _, err := a.Resume(ctx, "d1", nodeapi.ResumeRequest{}); err != nil {
		t.Fatalf("resume of a sandbox released at the drain: %v", err)
	}
	if d.restores.Load() != 0 {
		t.Error("a sandbox released at the drain resumed into a prepared container")
	}
}
