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
// image into it and makes no host object. The preparation holds the
// sandbox's s.op, handed over by the pause, so a resume, kill or eviction
// that arrives meanwhile waits for it.
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
// besides them (they stay in its record and s.cg).
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
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.sandboxes {
		if s.kept != nil {
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

// beginKeep decides whether s, just checkpointed, keeps its host objects.
// When it does, s is marked kept, its time bound armed, the preparation's
// place in a.wg taken (the caller starts prepareResume and hands it s.op),
// and older kept sandboxes over the count are evicted. Low memory keeps
// none and evicts every kept sandbox.
func (a *Agent) beginKeep(s *sbx) bool {
	if _, ok := a.restorePreparer(); !ok {
		return false
	}
	low := a.memoryLow()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || s.gone || a.draining {
		return false
	}
	var others []*sbx
	for _, o := range a.sandboxes {
		if o != s && o.kept != nil {
			others = append(others, o)
		}
	}
	if low {
		a.evictLocked(others, "memory_low")
		return false
	}
	slices.SortFunc(others, func(x, y *sbx) int { return x.kept.since.Compare(y.kept.since) })
	if over := len(others) + 1 - a.cfg.KeepPaused; over > 0 {
		a.evictLocked(others[:over], "count")
	}
	k := &keptObjects{since: a.clock.Now()}
	s.kept = k
	k.timer = a.clock.AfterFunc(a.cfg.KeepPausedFor, func() {
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return
		}
		a.wg.Add(1)
		a.mu.Unlock()
		defer a.wg.Done()
		a.evictKept(s, k, "time")
	})
	a.wg.Add(1) // the preparation's
	return true
}

// evictLocked starts the eviction of every sandbox of victims (a.mu is
// held, the agent is not closed).
func (a *Agent) evictLocked(victims []*sbx, reason string) {
	for _, v := range victims {
		k := v.kept
		a.wg.Go(func() { a.evictKept(v, k, reason) })
	}
}

// dropKeptLocked ends s's keep (its objects are the caller's to release
// or use). a.mu is held.
func (a *Agent) dropKeptLocked(s *sbx) {
	if s.kept == nil {
		return
	}
	if s.kept.timer != nil {
		s.kept.timer.Stop()
	}
	s.kept = nil
}

// prepareResume makes the runtime container of kept sandbox s ready for
// its resume: the checkpointed container is deleted and a new one created
// in the kept slot, cgroup and mount. The caller (the pause) took its
// place in a.wg and handed it s.op, which it releases. A failure releases
// every kept object; the sandbox then resumes the slow way. Its phases
// (logged with "paused sandbox prepared for resume"): delete, create.
func (a *Agent) prepareResume(s *sbx, k *keptObjects, log *slog.Logger) {
	defer a.wg.Done()
	defer s.op.Unlock()
	ctx := context.WithoutCancel(a.ctx)
	a.mu.Lock()
	r, current := s.rec, !s.gone && s.kept == k
	a.mu.Unlock()
	if !current {
		return
	}
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
		rctx, cancel := context.WithTimeout(ctx, a.cfg.ReadyTimeout)
		if serr := a.spawn.do(func() { err = prep.PrepareRestore(rctx, spec) }); serr != nil {
			err = serr
		}
		cancel()
	}
	ph.done("create")
	if err != nil {
		log.Warn("prepare paused sandbox for its resume; its host objects are released, it resumes the slow way", "error", err)
		a.releaseKept(ctx, s, log)
		return
	}
	a.mu.Lock()
	k.prepared = true
	a.mu.Unlock()
	log.Info("paused sandbox prepared for resume", ph.observe(a.phaseDur)...)
}

// evictKept ends the keep k of paused sandbox s, if it is still current:
// its prepared container goes and its slot, cgroup and mount are released.
func (a *Agent) evictKept(s *sbx, k *keptObjects, reason string) {
	s.op.Lock()
	defer s.op.Unlock()
	a.mu.Lock()
	current := !s.gone && s.kept == k
	id, execID := s.rec.ID, s.rec.ExecutionID
	a.mu.Unlock()
	if !current {
		return
	}
	log := a.log.With("sandbox_id", id, "execution_id", execID)
	a.releaseKept(context.WithoutCancel(a.ctx), s, log)
	log.Info("released the kept host objects of a paused sandbox; it resumes the slow way", "reason", reason, "kept_for", a.clock.Now().Sub(k.since))
}

// releaseKept ends s's keep and releases its objects as a pause that does
// not keep them does; the caller holds s.op.
func (a *Agent) releaseKept(ctx context.Context, s *sbx, log *slog.Logger) {
	a.mu.Lock()
	a.dropKeptLocked(s)
	a.mu.Unlock()
	if err := a.releaseCheckpointed(ctx, s, log); err != nil {
		log.Warn("release kept host objects of paused sandbox; the leak reclaim will retry", "error", err)
	}
	if err := a.persist(s); err != nil {
		log.Warn("persist paused state", "error", err)
	}
}

// releaseAllKept evicts every kept sandbox at once (Close, low memory).
func (a *Agent) releaseAllKept(reason string) {
	type victim struct {
		s *sbx
		k *keptObjects
	}
	var vs []victim
	a.mu.Lock()
	for _, s := range a.sandboxes {
		if s.kept != nil {
			vs = append(vs, victim{s, s.kept})
		}
	}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, v := range vs {
		wg.Go(func() { a.evictKept(v.s, v.k, reason) })
	}
	wg.Wait()
}

// takeKept ends s's keep for its resume (the caller holds s.op) and says
// whether its prepared container is there to restore into. A keep whose
// preparation did not finish (none should be left: it holds s.op) is
// released first.
func (a *Agent) takeKept(ctx context.Context, s *sbx, log *slog.Logger) bool {
	a.mu.Lock()
	k := s.kept
	a.dropKeptLocked(s)
	a.mu.Unlock()
	if k == nil {
		return false
	}
	if !k.prepared {
		a.releaseKept(ctx, s, log)
		return false
	}
	return true
}

// HostObjectsKept reports whether paused sandbox id keeps its host objects
// with a runtime container prepared for its resume, once a preparation in
// flight has ended (for tests and benchmarks).
func (a *Agent) HostObjectsKept(id string) (bool, error) {
	s, err := a.lookup(id)
	if err != nil {
		return false, err
	}
	s.op.Lock()
	defer s.op.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.gone {
		return false, a.goneErr(id)
	}
	return s.rec.State == sandbox.StatePaused && s.kept != nil && s.kept.prepared, nil
}
