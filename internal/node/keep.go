package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// A pause with memory stops the sandbox, but its network slot, cgroup and
// root filesystem's mount may stay for a while: kept, they let a resume
// restore memory only. Right after the pause has answered, the preparation
// (prepareResume) deletes the checkpointed runtime container, gives the
// slot's guest end its address and route back (netslot's Rearm: runsc had
// moved them into its own stack) and creates a new container for the same
// sandbox in the kept slot, cgroup and mount
// (driver.RestorePreparer: `runsc create`); a resume then restores the
// image into it and makes no host object. The preparation runs in a
// goroutine of its own once the pause has released the sandbox's op: it
// takes no lock across its work, but the handle's preparing channel, set
// by the pause under op, stays open until it ends (whether it prepared
// the container or, failing, released the kept objects), and every
// operation of the sandbox waits on it once it holds op (awaitPrepare),
// so a resume, kill or eviction that arrives meanwhile waits for it.
//
// Only a bounded set is kept (Config.KeepPaused, KeepPausedFor,
// KeepPausedMinFreeMemory): the most recently paused, each for a while,
// and none while the host is low on memory. Eviction (the time is up, a
// newer pause is over the count, memory is low, Close) deletes the
// prepared container and releases the slot, cgroup and mount as a pause
// without keeping does (releaseCheckpointed); the sandbox stays paused and
// resumes the slow way. Its memory image and record are never touched.
//
// The record of a kept sandbox names its slot, cgroup and root: an agent
// that starts on the data dir of one that did not close (recover.go)
// reclaims those objects and the prepared container, and the sandbox stays
// paused with its image.

// Defaults of Config's keep bounds.
const (
	DefaultKeepPaused              = 8
	DefaultKeepPausedFor           = 10 * time.Minute
	DefaultKeepPausedMinFreeMemory = 1 << 30
)

// keptObjects is what a paused sandbox that keeps its host objects holds
// besides them (they stay in its record and handle.cg). Its handle's mu
// guards prepared.
type keptObjects struct {
	since time.Time
	timer Timer // ends the keep after KeepPausedFor
	// prepared is set once the runtime container is made; a preparation
	// that fails releases everything, so once the preparation is over a
	// kept sandbox is prepared.
	prepared bool
}

func (c *Config) keepDefaults() error {
	if c.KeepPaused == 0 {
		c.KeepPaused = DefaultKeepPaused
	}
	if c.KeepPausedFor == 0 {
		c.KeepPausedFor = DefaultKeepPausedFor
	}
	if c.KeepPausedFor < 0 {
		return fmt.Errorf("node config: keep paused for %s: %w", c.KeepPausedFor, errdefs.ErrInvalid)
	}
	if c.KeepPausedMinFreeMemory == 0 {
		c.KeepPausedMinFreeMemory = DefaultKeepPausedMinFreeMemory
	}
	if c.FreeMemory == nil {
		c.FreeMemory = memAvailable
	}
	return nil
}

// slotRearmer is implemented by network pools whose slots a second
// runtime start can use (netslot's: Rearm puts back the guest's address
// and route, which runsc moved into its own stack at the first).
type slotRearmer interface {
	Rearm(ctx context.Context, s *netslot.Slot) error
}

// restorePreparer is the driver's RestorePreparer when the agent keeps
// paused sandboxes at all: the driver prepares restores and the network
// pool rearms slots.
func (a *Agent) restorePreparer() (driver.RestorePreparer, bool) {
	if a.cfg.KeepPaused < 0 {
		return nil, false
	}
	if _, ok := a.checkpointer(); !ok {
		return nil, false
	}
	if _, ok := a.cfg.Net.(slotRearmer); !ok {
		return nil, false
	}
	p, ok := a.drv.(driver.RestorePreparer)
	return p, ok
}

// keepMemoryCheck is how often the host's available memory is looked at
// while sandboxes keep their host objects: when it falls below the floor
// between pauses, they are released then, not at the next pause.
const keepMemoryCheck = 2 * time.Second

// startKeepWatch starts the loop that releases every kept sandbox's host
// objects when the host's memory runs low (a driver that cannot prepare a
// restore keeps none: no loop).
func (a *Agent) startKeepWatch() {
	if _, ok := a.restorePreparer(); !ok || a.cfg.KeepPaused <= 0 {
		return
	}
	a.wg.Go(func() {
		for a.sleep(keepMemoryCheck) {
			if a.anyKept() && a.memoryLow() {
				a.log.Info("host memory low: paused sandboxes release the host objects they kept")
				a.releaseAllKept("memory_low")
			}
		}
	})
}

var _ nodeapi.Drainer = (*Agent)(nil)

// SetDraining implements nodeapi.Drainer. A node that begins to drain
// releases the host objects every paused sandbox kept (in the background:
// it does not block), and keeps none while it drains: a draining node
// takes no resume, so none would be used. Undrained, it keeps them again
// from the next pause.
func (a *Agent) SetDraining(draining bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	was := a.draining
	a.draining = draining
	if !draining || was || a.closed {
		return
	}
	a.log.Info("node draining: paused sandboxes release the host objects they kept")
	a.wg.Go(func() { a.releaseAllKept("drain") })
}

// anyKept reports whether some paused sandbox keeps its host objects.
func (a *Agent) anyKept() bool {
	for _, h := range a.handles() {
		if h.keptNow() != nil {
			return true
		}
	}
	return false
}

// memoryLow reports whether the host's available memory is below the
// keep's floor (an unreadable figure counts as low).
func (a *Agent) memoryLow() bool {
	free, err := a.cfg.FreeMemory()
	return err != nil || a.cfg.KeepPausedMinFreeMemory > 0 && free < uint64(a.cfg.KeepPausedMinFreeMemory)
}

// keptHandle is a handle with the keep it had when looked at.
type keptHandle struct {
	h *handle
	k *keptObjects
}

// beginKeep decides whether h, just checkpointed (the caller holds its
// op), keeps its host objects, and returns the keep when it does: h is
// marked kept, its time bound armed, and older kept sandboxes over the
// count are evicted; the caller starts the preparation (startPrepare).
// Low memory keeps none and evicts every kept sandbox.
func (a *Agent) beginKeep(h *handle) *keptObjects {
	if _, ok := a.restorePreparer(); !ok {
		return nil
	}
	low := a.memoryLow()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || h.isGone() || a.draining {
		return nil
	}
	var others []keptHandle
	for _, o := range a.sandboxes {
		if k := o.keptNow(); o != h && k != nil {
			others = append(others, keptHandle{o, k})
		}
	}
	if low {
		a.evictLocked(others, "memory_low")
		return nil
	}
	slices.SortFunc(others, func(x, y keptHandle) int { return x.k.since.Compare(y.k.since) })
	if over := len(others) + 1 - a.cfg.KeepPaused; over > 0 {
		a.evictLocked(others[:over], "count")
	}
	return h.keep()
}

// keep marks h kept from now, for at most KeepPausedFor, with its
// preparation to come: from here until endPrepare every operation of h
// waits for it (awaitPrepare).
func (h *handle) keep() *keptObjects {
	a := h.a
	h.mu.Lock()
	defer h.mu.Unlock()
	k := &keptObjects{since: a.clock.Now()}
	h.kept = k
	h.preparing = make(chan struct{})
	k.timer = a.clock.AfterFunc(a.cfg.KeepPausedFor, func() {
		a.tracked(func() { h.evictKept(k, "time") })
	})
	return k
}

// evictLocked starts the eviction of every sandbox of victims (a.mu is
// held, the agent is not closed).
func (a *Agent) evictLocked(victims []keptHandle, reason string) {
	for _, v := range victims {
		a.wg.Go(func() { v.h.evictKept(v.k, reason) })
	}
}

// keptNow is h's keep, if any.
func (h *handle) keptNow() *keptObjects {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kept
}

// dropKeptLocked ends h's keep (its objects are the caller's to release
// or use). h.mu is held.
func (h *handle) dropKeptLocked() {
	if h.kept == nil {
		return
	}
	if h.kept.timer != nil {
		h.kept.timer.Stop()
	}
	h.kept = nil
}

// dropKept ends h's keep and returns it (nil: h kept nothing).
func (h *handle) dropKept() *keptObjects {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := h.kept
	h.dropKeptLocked()
	return k
}

// awaitPrepare waits for the preparation of h's kept objects in flight,
// if any, whether it keeps them or, failing, releases them; every
// operation of h calls it once it holds h.op, so that none touches the
// objects while the preparation does.
func (h *handle) awaitPrepare() {
	if c := h.preparation(); c != nil {
		<-c
	}
}

// preparation is the channel closed when h's preparation in flight ends;
// nil when none is.
func (h *handle) preparation() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.preparing
}

// startPrepare starts the preparation of keep k of h, which the pause
// that kept its objects has just released; once the agent is closed none
// starts, and the keep stays unprepared for Close to release.
func (h *handle) startPrepare(k *keptObjects, log *slog.Logger) {
	if !h.a.goTracked(func() { h.prepareResume(k, log) }) {
		h.endPrepare(k, false)
	}
}

// endPrepare ends the preparation of h's keep k: prepared says whether
// the runtime container is made. The operations waiting for it go on.
func (h *handle) endPrepare(k *keptObjects, prepared bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k.prepared = prepared
	if h.preparing != nil {
		close(h.preparing)
		h.preparing = nil
	}
}

// prepareResume makes the runtime container of kept sandbox h ready for
// its resume: the checkpointed container is deleted and a new one created
// in the kept slot, cgroup and mount. No operation of h runs meanwhile
// (they wait in awaitPrepare). A failure releases every kept object; the
// sandbox then resumes the slow way. Its phases (logged with "paused
// sandbox prepared for resume"): delete, create.
func (h *handle) prepareResume(k *keptObjects, log *slog.Logger) {
	a := h.a
	prepared := false
	defer func() { h.endPrepare(k, prepared) }()
	ctx := context.WithoutCancel(a.ctx)
	st := h.get()
	if st.gone || h.keptNow() != k {
		return
	}
	r := st.rec
	prep, _ := a.drv.(driver.RestorePreparer)
	ph := a.phases("prepare")
	err := a.drv.Delete(ctx, r.ID)
	ph.done("delete")
	if err == nil {
		// runsc took the guest's address and route into its stack.
		err = a.cfg.Net.(slotRearmer).Rearm(ctx, r.Slot)
	}
	var spec driver.Spec
	if err == nil {
		spec, err = a.sandboxSpec(r, r.RootFS, r.Slot)
	}
	if err == nil {
		err = a.prepareRestore(ctx, prep, spec)
	}
	ph.done("create")
	if err != nil {
		log.Warn("prepare paused sandbox for its resume; its host objects are released, it resumes the slow way", "error", err)
		h.releaseKept(ctx, log)
		return
	}
	prepared = true
	log.Info("paused sandbox prepared for resume", ph.observe(a.phaseDur)...)
}

// prepareRestore creates the runtime container of spec for a restore,
// within the ready timeout, on a spawner thread.
func (a *Agent) prepareRestore(ctx context.Context, prep driver.RestorePreparer, spec driver.Spec) error {
	rctx, cancel := context.WithTimeout(ctx, a.cfg.ReadyTimeout)
	defer cancel()
	var err error
	if serr := a.spawn.do(func() { err = prep.PrepareRestore(rctx, spec) }); serr != nil {
		return serr
	}
	return err
}

// evictKept ends the keep k of paused sandbox h, if it is still current:
// its prepared container goes and its slot, cgroup and mount are released.
func (h *handle) evictKept(k *keptObjects, reason string) {
	a := h.a
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	st := h.get()
	if st.gone || h.keptNow() != k {
		return
	}
	log := a.log.With("sandbox_id", h.id, "execution_id", st.rec.ExecutionID)
	h.releaseKept(context.WithoutCancel(a.ctx), log)
	log.Info("released the kept host objects of a paused sandbox; it resumes the slow way", "reason", reason, "kept_for", a.clock.Now().Sub(k.since))
}

// releaseKept ends h's keep and releases its objects as a pause that does
// not keep them does; the caller holds h.op, or is the preparation.
func (h *handle) releaseKept(ctx context.Context, log *slog.Logger) {
	h.dropKept()
	if err := h.releaseCheckpointed(ctx, log); err != nil {
		log.Warn("release kept host objects of paused sandbox; the leak reclaim will retry", "error", err)
	}
	if err := h.persist(); err != nil {
		log.Warn("persist paused state", "error", err)
	}
}

// releaseAllKept evicts every kept sandbox at once (Close, low memory).
func (a *Agent) releaseAllKept(reason string) {
	var vs []keptHandle
	for _, h := range a.handles() {
		if k := h.keptNow(); k != nil {
			vs = append(vs, keptHandle{h, k})
		}
	}
	var wg sync.WaitGroup
	for _, v := range vs {
		wg.Go(func() { v.h.evictKept(v.k, reason) })
	}
	wg.Wait()
}

// takeKept ends h's keep for its resume (the caller holds h.op, after
// awaitPrepare) and says whether its prepared container is there to
// restore into. A keep that is not prepared is released first.
func (h *handle) takeKept(ctx context.Context, log *slog.Logger) bool {
	k := h.dropKept()
	if k == nil {
		return false
	}
	if !h.isPrepared(k) {
		h.releaseKept(ctx, log)
		return false
	}
	return true
}

func (h *handle) isPrepared(k *keptObjects) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return k.prepared
}

// HostObjectsKept reports whether paused sandbox id keeps its host objects
// with a runtime container prepared for its resume, once a preparation in
// flight has ended (for tests and benchmarks).
func (a *Agent) HostObjectsKept(id string) (bool, error) {
	h, err := a.lookup(id)
	if err != nil {
		return false, err
	}
	return h.hostObjectsKept()
}

func (h *handle) hostObjectsKept() (bool, error) {
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return false, h.a.goneErr(h.id)
	}
	return h.rec.State == sandbox.StatePaused && h.kept != nil && h.kept.prepared, nil
}
