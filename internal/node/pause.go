package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// forkParallelism is how many copies of a fork are restored at once from
// its one image. Restoring all ten of a fork of 10 at once took 2.6 s
// against 3.3 s four at a time on the 2-core development host (a restore
// waits on more than the CPU); the bound keeps a large fork from starting
// every runsc at once.
const forkParallelism = 16

// forksDir holds the memory images of forks in progress; none outlives
// the agent.
func forksDir(dataDir string) string { return filepath.Join(dataDir, "forks") }

// snapshotDir is where a paused sandbox's memory image lives.
func snapshotDir(dataDir, id string) string {
	return filepath.Join(sandboxDir(dataDir, id), "snapshot")
}

// Locks of one sandbox (pause, resume and fork here; create, kill and
// exit handling elsewhere follow the same order):
//
//   - s.op is the sandbox's operation lock: held for the whole of an
//     operation that changes its host objects, taken before a.mu and never
//     while a.mu is held.
//   - a.mu guards the fields of every sbx and the agent's maps. It is held
//     only to read or write them, released with defer in a function of its
//     own (the ...Locked helpers and the admit/mark functions below), and
//     never across a driver, network, layer or state-record call.
//   - s.checkpointing is set under a.mu before s.op is taken, so that a
//     second pause or fork of the same sandbox is refused at once
//     (ErrExhausted) instead of queueing behind the first one's s.op.
//
// A fork takes its copies' s.op (new sandboxes no one else can see yet)
// while it registers them, then the source's s.op for the checkpoint and
// the layer copies only.

// pause implements Service.Pause.
//
// With req.Memory the sandbox's memory is checkpointed to disk; without it
// only the writable layer is kept. Either way every host object but the
// layer and the image is released, except that a recently paused sandbox
// with memory keeps its slot, cgroup and mount for a while (keep.go): its
// runtime container is made again for the resume after the pause has
// answered. A pause the node cannot do now (a checkpoint of the same
// sandbox in flight, low disk) is refused with ErrExhausted, and the
// sandbox's backstop is pushed forward while the control plane retries
// (docs/lifecycle.md §3). Its phases (logged with "sandbox paused"): lock,
// checkpoint and, unless they are kept, release (the runtime container,
// cgroup, network slot and root filesystem's mount, released at once: the
// checkpoint stopped the sandbox), or without memory sync, kill, delete,
// cgroup, slot and unmount one after the other (the sandbox runs until
// killed); then record.
func (a *Agent) pause(ctx context.Context, id string, req nodeapi.PauseRequest) (*nodeapi.Sandbox, error) {
	s, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	var ckpt driver.Checkpointer
	if req.Memory {
		c, ok := a.checkpointer()
		if !ok {
			return nil, fmt.Errorf("sandbox %q: pause with memory: driver %s cannot checkpoint memory; pause without memory (filesystem only) instead: %w", id, a.drv.Name(), errdefs.ErrUnsupported)
		}
		ckpt = c
	}
	if err := a.admitPause(s, req); err != nil {
		return nil, err
	}
	if req.Memory {
		defer a.setCheckpointing(s, false)
	}

	ph := a.phases("pause")
	s.op.Lock()
	handedOff := false // to the preparation of a kept sandbox (keep.go)
	defer func() {
		if !handedOff {
			s.op.Unlock()
		}
	}()
	execID, err := a.markPausing(s)
	if err != nil {
		return nil, err
	}
	ph.done("lock")
	log := a.log.With("sandbox_id", id, "execution_id", execID, "memory", req.Memory)
	if err := a.persist(s); err != nil {
		log.Warn("persist pausing state", "error", err)
	}

	snap := snapshotDir(a.cfg.DataDir, id)
	if err := os.RemoveAll(snap); err != nil {
		return nil, a.pauseFailed(ctx, s, log, fmt.Errorf("clear snapshot dir: %w", err))
	}
	if req.Memory {
		if err := os.MkdirAll(snap, 0o700); err != nil {
			return nil, a.pauseFailed(ctx, s, log, fmt.Errorf("snapshot dir: %w", err))
		}
		if err := ckpt.Checkpoint(ctx, id, snap, driver.CheckpointOptions{}); err != nil {
			return nil, a.pauseFailed(ctx, s, log, fmt.Errorf("checkpoint: %w", err))
		}
		ph.done("checkpoint")
	} else {
		a.syncGuest(ctx, id, log)
		ph.done("sync")
	}

	cctx := context.WithoutCancel(ctx)
	keep := false
	if req.Memory {
		if keep = a.beginKeep(s); !keep {
			if err := a.releaseCheckpointed(cctx, s, log); err != nil {
				log.Warn("release host objects of paused sandbox; the leak reclaim will retry", "error", err)
			}
			ph.done("release")
		}
	} else {
		if err := a.releaseRuntime(cctx, s, log, ph); err != nil {
			log.Warn("release host objects of paused sandbox; the leak reclaim will retry", "error", err)
		}
		a.unmountPaused(cctx, id, log)
		ph.done("unmount")
	}
	v := a.markPaused(s, req.Memory)
	if err := a.persist(s); err != nil {
		log.Warn("persist paused state", "error", err)
	}
	ph.done("record")
	log.Info("sandbox paused", append([]any{"kept", keep}, ph.observe(a.phaseDur)...)...)
	if keep {
		handedOff = true
		a.mu.Lock()
		k := s.kept
		a.mu.Unlock()
		go a.prepareResume(s, k, log)
	}
	return v, nil
}

// releaseCheckpointed releases the host objects of s once a checkpoint
// has stopped it: its runtime container, cgroup, network slot and root
// filesystem's mount, all at once (nothing runs in them any more). It goes
// on past errors and returns them joined.
func (a *Agent) releaseCheckpointed(ctx context.Context, s *sbx, log *slog.Logger) error {
	a.mu.Lock()
	id, slot, cg, cgName := s.rec.ID, s.rec.Slot, s.cg, s.rec.Cgroup
	a.mu.Unlock()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	try := func(what string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, fmt.Errorf("%s: %w", what, err))
			}
		})
	}
	try("runtime container", func() error { return a.drv.Delete(ctx, id) })
	try("cgroup", func() error {
		if cg == nil && cgName != "" {
			c, err := a.cfg.Cgroups.Open(ctx, cgName)
			if errdefs.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			cg = c
		}
		if cg == nil {
			return nil
		}
		return cg.KillAll(ctx)
	})
	if slot != nil {
		try("network slot", func() error { return a.cfg.Net.Release(ctx, slot) })
	}
	wg.Go(func() { a.unmountPaused(ctx, id, log) })
	wg.Wait()
	a.clearHostObjects(s)
	return errors.Join(errs...)
}

// clearHostObjects forgets the slot, cgroup and root of s (released).
func (a *Agent) clearHostObjects(s *sbx) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.rec.Slot, s.rec.Cgroup, s.rec.RootFS, s.cg = nil, "", "", nil
}

func (a *Agent) unmountPaused(ctx context.Context, id string, log *slog.Logger) {
	if err := a.cfg.Layers.Unmount(ctx, id); err != nil {
		log.Warn("unmount root filesystem of paused sandbox", "error", err)
	}
}

// admitPause checks that s can be paused now and, for a pause with
// memory, marks its checkpoint in flight.
func (a *Agent) admitPause(s *sbx, req nodeapi.PauseRequest) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	id := s.rec.ID
	switch {
	case s.gone:
		return a.goneErr(id)
	case s.checkpointing:
		a.pushBackstopLocked(s)
		a.log.Info("pause refused: a checkpoint of this sandbox is in flight; backstop pushed forward", "sandbox_id", id)
		return fmt.Errorf("sandbox %q: a checkpoint is already in flight, try again later: %w", id, errdefs.ErrExhausted)
	case s.rec.State != sandbox.StateRunning:
		return fmt.Errorf("sandbox %q is %s, not running: %w", id, s.rec.State, errdefs.ErrConflict)
	case req.ExecutionID != "" && req.ExecutionID != s.rec.ExecutionID:
		return fmt.Errorf("sandbox %q: pause for execution %q, which is no longer current: %w", id, req.ExecutionID, errdefs.ErrConflict)
	}
	if req.Memory && a.cfg.MinFreeDiskBytes > 0 {
		free, err := a.cfg.FreeDisk(a.cfg.DataDir)
		if err == nil && free < uint64(a.cfg.MinFreeDiskBytes) {
			a.pushBackstopLocked(s)
			a.log.Info("pause refused: disk low; backstop pushed forward", "sandbox_id", id, "free_bytes", free)
			return fmt.Errorf("sandbox %q: not enough disk for a memory snapshot (%d bytes free), try again later: %w", id, free, errdefs.ErrExhausted)
		}
	}
	if req.Memory {
		s.checkpointing = true
	}
	return nil
}

func (a *Agent) setCheckpointing(s *sbx, v bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.checkpointing = v
}

// markPausing moves s (whose s.op the caller holds) to pausing, in a new
// epoch, and returns its execution ID; it fails when s is no longer
// running.
func (a *Agent) markPausing(s *sbx) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.gone {
		return "", a.goneErr(s.rec.ID)
	}
	if s.rec.State != sandbox.StateRunning {
		return "", fmt.Errorf("sandbox %q is %s, not running: %w", s.rec.ID, s.rec.State, errdefs.ErrConflict)
	}
	s.rec.State = sandbox.StatePausing
	s.rec.Epoch++
	a.stopTimersLocked(s)
	return s.rec.ExecutionID, nil
}

// markPaused moves s to paused and returns its view.
func (a *Agent) markPaused(s *sbx, memory bool) *nodeapi.Sandbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.rec.State = sandbox.StatePaused
	s.rec.PausedWithMemory = memory
	s.backstopFloor = time.Time{}
	return a.viewLocked(s)
}

// syncGuest asks the guest to flush its file systems before a
// filesystem-only pause kills it; best effort.
func (a *Agent) syncGuest(ctx context.Context, id string, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := a.drv.Exec(sctx, id, driver.Process{Args: []string{"/bin/sync"}}); err != nil {
		log.Debug("sync guest file systems before pause", "error", err)
	}
}

// pauseFailed handles a pause that failed after it started: a sandbox that
// still runs goes back to running (the pause is refused with ErrExhausted,
// so that the control plane retries and degrades, and the backstop is
// pushed); one that stopped is destroyed.
func (a *Agent) pauseFailed(ctx context.Context, s *sbx, log *slog.Logger, cause error) error {
	id := s.rec.ID
	st, err := a.drv.Status(ctx, id)
	if err == nil && (st.State == driver.StateRunning || st.State == driver.StateFrozen) {
		a.markRunningAgain(s)
		if err := a.persist(s); err != nil {
			log.Warn("persist running state after failed pause", "error", err)
		}
		log.Warn("pause failed; sandbox keeps running", "error", cause)
		return fmt.Errorf("sandbox %q: pause failed, the sandbox keeps running: %w", id, errors.Join(cause, errdefs.ErrExhausted))
	}
	execID := a.executionID(s)
	klog := log.With("kill_reason", sandbox.KillReason("").String())
	klog.Error("pause failed and the sandbox stopped", "error", cause)
	a.mu.Lock()
	internal := s.internal
	a.mu.Unlock()
	a.ownKill(ctx, s, nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: id, ExecutionID: execID, At: a.clock.Now()}, internal, klog)
	return fmt.Errorf("sandbox %q: pause failed and the sandbox stopped: %w", id, errors.Join(cause, errdefs.ErrUnavailable))
}

// markRunningAgain puts s, whose pause failed with the sandbox still
// running, back to running in a new epoch, its backstop pushed forward.
func (a *Agent) markRunningAgain(s *sbx) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.rec.State = sandbox.StateRunning
	s.rec.Epoch++
	a.pushBackstopLocked(s)
	a.startWatcherLocked(s)
}

func (a *Agent) executionID(s *sbx) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return s.rec.ExecutionID
}

// resume implements Service.Resume. A sandbox paused with memory is restored (on a
// new network slot, or into the container prepared in the slot, cgroup
// and mount it kept: keep.go); one paused without it boots again on its
// writable layer and runs the template's start command. Its phases
// (logged with "sandbox resumed"): lock (which waits for a preparation in
// flight), bringUp's (cgroup, layer, slot, none of them for a prepared
// sandbox; restore or start, health, init, start_cmd), record and cleanup
// (the used image).
func (a *Agent) resume(ctx context.Context, id string, req nodeapi.ResumeRequest) (*nodeapi.Sandbox, error) {
	s, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	ph := a.phases("resume")
	s.op.Lock()
	defer s.op.Unlock()
	prev, execID, err := a.beginResume(s, req)
	if err != nil {
		return nil, err
	}
	ph.done("lock")
	if prev.PausedWithMemory {
		if _, ok := a.checkpointer(); !ok {
			a.undoResume(s, prev)
			return nil, fmt.Errorf("sandbox %q: paused with memory, which driver %s cannot restore: %w", id, a.drv.Name(), errdefs.ErrUnsupported)
		}
	}
	a.reclaimMu.RLock()
	defer a.reclaimMu.RUnlock()
	log := a.log.With("sandbox_id", id, "execution_id", execID, "memory", prev.PausedWithMemory)
	m := startMode{layerExists: true, runStartCmd: !prev.PausedWithMemory, phases: ph}
	snap := snapshotDir(a.cfg.DataDir, id)
	if prev.PausedWithMemory {
		m.restoreDir = snap
	}
	m.prepared = a.takeKept(ctx, s, log)
	err = a.bringUp(ctx, s, m, log)
	if err != nil && m.prepared {
		// bringUp released the kept objects: try the slow way once.
		log.Warn("restore into the prepared sandbox failed; resuming the slow way", "error", err)
		a.clearHostObjects(s)
		m.prepared = false
		err = a.bringUp(ctx, s, m, log)
	}
	if err != nil && m.restoreDir != "" && len(prev.Volumes) > 0 && !errdefs.IsUnsupported(err) && ctx.Err() == nil {
		m = a.volumeResumeFallback(s, ph, log, err)
		err = a.bringUp(ctx, s, m, log)
	}
	if err != nil {
		a.undoResume(s, prev)
		log.Debug("resume failed; the sandbox stays paused", "error", err)
		return nil, fmt.Errorf("sandbox %q: resume: %w", id, err)
	}
	v := a.markResumed(s)
	if err := a.persist(s); err != nil {
		log.Warn("persist resumed state", "error", err)
	}
	ph.done("record")
	if err := os.RemoveAll(snap); err != nil {
		log.Warn("remove used memory snapshot", "error", err)
	}
	ph.done("cleanup")
	log.Info("sandbox resumed", append([]any{"address", v.Address, "prepared", m.prepared}, ph.observe(a.phaseDur)...)...)
	return v, nil
}

// beginResume checks that s (whose s.op the caller holds) is paused and
// gives it the resume's execution ID and end; it returns the record as it
// was, for undoResume, and the new execution ID.
func (a *Agent) beginResume(s *sbx, req nodeapi.ResumeRequest) (record, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := s.rec
	if s.gone {
		return prev, "", a.goneErr(s.rec.ID)
	}
	if s.rec.State != sandbox.StatePaused {
		return prev, "", fmt.Errorf("sandbox %q is %s, not paused: %w", s.rec.ID, s.rec.State, errdefs.ErrConflict)
	}
	execID := req.ExecutionID
	if execID == "" {
		execID = sandbox.NewExecutionID()
	}
	s.rec.ExecutionID = execID
	if !req.EndAt.IsZero() {
		s.rec.EndAt = req.EndAt
	}
	if !s.rec.PausedWithMemory {
		// A fresh boot: nothing of the first boot's mounts to match.
		s.rec.GuestMemoryMB = 0
	}
	return prev, execID, nil
}

// undoResume gives s back the execution ID, end and boot memory it had
// before a resume that failed (it stays paused).
func (a *Agent) undoResume(s *sbx, prev record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.rec.ExecutionID, s.rec.EndAt, s.rec.GuestMemoryMB = prev.ExecutionID, prev.EndAt, prev.GuestMemoryMB
}

// markResumed moves s to running in a new epoch and returns its view.
func (a *Agent) markResumed(s *sbx) *nodeapi.Sandbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	s.rec.State = sandbox.StateRunning
	s.rec.Epoch++
	s.rec.StartedAt = a.clock.Now()
	s.rec.PausedWithMemory = false
	a.armBackstopLocked(s)
	a.startWatcherLocked(s)
	return a.viewLocked(s)
}

// admitFork checks that src can be forked into req.IDs now, registers the
// copies (each with its s.op held, for the caller to release) and marks
// src's checkpoint in flight. It returns src's record and the copies.
func (a *Agent) admitFork(src *sbx, req nodeapi.ForkRequest) (record, []*sbx, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id := src.rec.ID
	switch {
	case a.closed:
		return record{}, nil, fmt.Errorf("node agent: %w", errdefs.ErrUnavailable)
	case src.gone:
		return record{}, nil, a.goneErr(id)
	case src.checkpointing:
		return record{}, nil, fmt.Errorf("sandbox %q: a checkpoint is already in flight, try again later: %w", id, errdefs.ErrExhausted)
	case src.rec.State != sandbox.StateRunning:
		return record{}, nil, fmt.Errorf("sandbox %q is %s, not running: %w", id, src.rec.State, errdefs.ErrConflict)
	}
	for _, cid := range req.IDs {
		if _, ok := a.sandboxes[cid]; ok {
			return record{}, nil, fmt.Errorf("sandbox %q: fork: copy %q: %w", id, cid, errdefs.ErrAlreadyExists)
		}
	}
	parent := src.rec
	children := make([]*sbx, len(req.IDs))
	for i, cid := range req.IDs {
		r := parent
		r.ID = cid
		r.ExecutionID = sandbox.NewExecutionID()
		if len(req.ExecutionIDs) > 0 {
			r.ExecutionID = req.ExecutionIDs[i]
		}
		if !req.EndAt.IsZero() {
			r.EndAt = req.EndAt
		}
		if len(req.EnvdAccessTokens) > 0 {
			// The copy's own: its envd gets it at the /init after the
			// restore (bringUp), and at every resume after.
			r.AccessToken = req.EnvdAccessTokens[i]
		}
		r.State, r.Epoch, r.Slot, r.Cgroup, r.RootFS, r.PausedWithMemory = sandbox.StateStarting, 0, nil, "", "", false
		r.EnvVars, r.Metadata = maps.Clone(parent.EnvVars), maps.Clone(parent.Metadata)
		children[i] = &sbx{rec: r}
		children[i].op.Lock()
		a.sandboxes[cid] = children[i]
	}
	src.checkpointing = true
	return parent, children, nil
}

// forkImage checkpoints running sandbox src into img, leaving it running,
// and gives every copy a directory, a state record and a copy of src's
// writable layer, all under src's s.op. It returns how many copies got a
// directory (those fail must destroy).
func (a *Agent) forkImage(ctx context.Context, ckpt driver.Checkpointer, src *sbx, img string, children []*sbx, ph *phaseTimer) (made int, err error) {
	src.op.Lock()
	defer src.op.Unlock()
	id := src.rec.ID
	if !a.running(src) {
		return 0, fmt.Errorf("sandbox stopped: %w", errdefs.ErrConflict)
	}
	ph.done("lock")
	if err := os.MkdirAll(img, 0o700); err != nil {
		return 0, err
	}
	if err := ckpt.Checkpoint(ctx, id, img, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	ph.done("checkpoint")
	defer ph.done("layers")
	for _, c := range children {
		cdir := sandboxDir(a.cfg.DataDir, c.rec.ID)
		if err := removeDir(cdir); err != nil {
			return made, err
		}
		if err := os.MkdirAll(cdir, 0o700); err != nil {
			return made, err
		}
		made++
		if err := a.persist(c); err != nil {
			return made, err
		}
		if err := a.cfg.Layers.Copy(ctx, id, c.rec.ID); err != nil {
			return made, fmt.Errorf("copy writable layer for %q: %w", c.rec.ID, err)
		}
	}
	return made, nil
}

// running reports whether s is known and running.
func (a *Agent) running(s *sbx) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !s.gone && s.rec.State == sandbox.StateRunning
}

// fork implements Service.Fork: it checkpoints the running sandbox (which keeps
// running) once and restores that one image as len(req.IDs) new sandboxes,
// forkParallelism at a time, each with a copy of the writable layer and
// its own slot and cgroup. If one copy fails, the copies made so far are
// destroyed. Its phases (logged with "sandbox forked"): lock, checkpoint,
// layers (the copies' layers, made from the source's), restore (all the
// copies) and record.
func (a *Agent) fork(ctx context.Context, id string, req nodeapi.ForkRequest) ([]*nodeapi.Sandbox, error) {
	src, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	ckpt, ok := a.checkpointer()
	if !ok {
		return nil, fmt.Errorf("sandbox %q: fork: driver %s cannot checkpoint memory: %w", id, a.drv.Name(), errdefs.ErrUnsupported)
	}
	if len(req.IDs) == 0 {
		return nil, fmt.Errorf("sandbox %q: fork: no IDs for the copies: %w", id, errdefs.ErrInvalid)
	}
	if len(req.ExecutionIDs) != 0 && len(req.ExecutionIDs) != len(req.IDs) {
		return nil, fmt.Errorf("sandbox %q: fork: %d execution IDs for %d copies: %w", id, len(req.ExecutionIDs), len(req.IDs), errdefs.ErrInvalid)
	}
	if len(req.EnvdAccessTokens) != 0 && len(req.EnvdAccessTokens) != len(req.IDs) {
		return nil, fmt.Errorf("sandbox %q: fork: %d access tokens for %d copies: %w", id, len(req.EnvdAccessTokens), len(req.IDs), errdefs.ErrInvalid)
	}
	seen := map[string]bool{}
	for _, cid := range req.IDs {
		if !sandbox.ValidID(cid) || seen[cid] || cid == id {
			return nil, fmt.Errorf("sandbox %q: fork: copy id %q: %w", id, cid, errdefs.ErrInvalid)
		}
		seen[cid] = true
	}

	parent, children, err := a.admitFork(src, req)
	if err != nil {
		return nil, err
	}
	defer a.setCheckpointing(src, false)
	a.reclaimMu.RLock()
	defer a.reclaimMu.RUnlock()
	log := a.log.With("sandbox_id", id, "execution_id", parent.ExecutionID, "copies", len(req.IDs))

	// fail destroys the copies (the first made of them have a directory
	// and a layer) and releases their s.op.
	fail := func(made int, err error) ([]*nodeapi.Sandbox, error) {
		for i, c := range children {
			clog := log.With("copy_id", c.rec.ID, "kill_reason", sandbox.KillReason("").String())
			if i < made {
				a.destroy(ctx, c, clog)
			} else {
				a.forget(c)
			}
			c.op.Unlock()
		}
		return nil, fmt.Errorf("sandbox %q: fork: %w", id, err)
	}

	// The image lives apart from the source, which may be killed while its
	// copies restore.
	img := filepath.Join(forksDir(a.cfg.DataDir), sandbox.HostName(id)+"-"+sandbox.RandomToken(6))
	defer os.RemoveAll(img)
	ph := a.phases("fork")
	if made, err := a.forkImage(ctx, ckpt, src, img, children, ph); err != nil {
		return fail(made, err)
	}

	// The copies come up in parallel, forkParallelism at a time.
	errs := make([]error, len(children))
	sem := make(chan struct{}, forkParallelism)
	var wg sync.WaitGroup
	for i, c := range children {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			clog := a.log.With("sandbox_id", c.rec.ID, "execution_id", c.rec.ExecutionID, "forked_from", id)
			errs[i] = a.bringUp(ctx, c, startMode{restoreDir: img, layerExists: true}, clog)
		})
	}
	wg.Wait()
	ph.done("restore")
	for i, err := range errs {
		if err != nil {
			return fail(len(children), fmt.Errorf("copy %q: %w", children[i].rec.ID, err))
		}
	}
	out := make([]*nodeapi.Sandbox, 0, len(children))
	for _, c := range children {
		out = append(out, a.markResumed(c))
		if err := a.persist(c); err != nil {
			log.Warn("persist forked sandbox", "copy_id", c.rec.ID, "error", err)
		}
		c.op.Unlock()
	}
	ph.done("record")
	log.Info("sandbox forked", ph.observe(a.phaseDur)...)
	return out, nil
}
