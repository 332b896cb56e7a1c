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
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// forkParallelism is how many copies of a fork are restored at once.
const forkParallelism = 4

// forksDir holds the memory images of forks in progress; none outlives
// the agent.
func forksDir(dataDir string) string { return filepath.Join(dataDir, "forks") }

// snapshotDir is where a paused sandbox's memory image lives.
func snapshotDir(dataDir, id string) string {
	return filepath.Join(sandboxDir(dataDir, id), "snapshot")
}

// pause implements Service.Pause.
//
// With req.Memory the sandbox's memory is checkpointed to disk; without it
// only the writable layer is kept. Either way every host object but the
// layer and the image is released. A pause the node cannot do now (a
// checkpoint of the same sandbox in flight, low disk) is refused with
// ErrExhausted, and the sandbox's backstop is pushed forward while the
// control plane retries (LIFECYCLE-RULES §3).
func (a *Agent) pause(ctx context.Context, id string, req PauseRequest) (*Sandbox, error) {
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
	a.mu.Lock()
	switch {
	case s.gone:
		a.mu.Unlock()
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	case s.checkpointing:
		a.pushBackstopLocked(s)
		a.mu.Unlock()
		a.log.Info("pause refused: a checkpoint of this sandbox is in flight; backstop pushed forward", "sandbox_id", id)
		return nil, fmt.Errorf("sandbox %q: a checkpoint is already in flight, try again later: %w", id, errdefs.ErrExhausted)
	case s.rec.State != sandbox.StateRunning:
		state := s.rec.State
		a.mu.Unlock()
		return nil, fmt.Errorf("sandbox %q is %s, not running: %w", id, state, errdefs.ErrConflict)
	case req.ExecutionID != "" && req.ExecutionID != s.rec.ExecutionID:
		a.mu.Unlock()
		return nil, fmt.Errorf("sandbox %q: pause for execution %q, which is no longer current: %w", id, req.ExecutionID, errdefs.ErrConflict)
	}
	if req.Memory && a.cfg.MinFreeDiskBytes > 0 {
		free, err := a.cfg.FreeDisk(a.cfg.DataDir)
		if err == nil && free < uint64(a.cfg.MinFreeDiskBytes) {
			a.pushBackstopLocked(s)
			a.mu.Unlock()
			a.log.Info("pause refused: disk low; backstop pushed forward", "sandbox_id", id, "free_bytes", free)
			return nil, fmt.Errorf("sandbox %q: not enough disk for a memory snapshot (%d bytes free), try again later: %w", id, free, errdefs.ErrExhausted)
		}
	}
	if req.Memory {
		s.checkpointing = true
	}
	a.mu.Unlock()
	if req.Memory {
		defer func() {
			a.mu.Lock()
			s.checkpointing = false
			a.mu.Unlock()
		}()
	}

	s.op.Lock()
	defer s.op.Unlock()
	a.mu.Lock()
	if s.gone || s.rec.State != sandbox.StateRunning {
		state := s.rec.State
		a.mu.Unlock()
		if s.gone {
			return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("sandbox %q is %s, not running: %w", id, state, errdefs.ErrConflict)
	}
	s.rec.State = sandbox.StatePausing
	s.rec.Epoch++
	a.stopTimersLocked(s)
	execID := s.rec.ExecutionID
	a.mu.Unlock()
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
		start := a.clock.Now()
		if err := ckpt.Checkpoint(ctx, id, snap, driver.CheckpointOptions{}); err != nil {
			return nil, a.pauseFailed(ctx, s, log, fmt.Errorf("checkpoint: %w", err))
		}
		log.Debug("memory checkpointed", "duration", a.clock.Now().Sub(start))
	} else {
		a.syncGuest(ctx, id, log)
	}

	cctx := context.WithoutCancel(ctx)
	if err := a.releaseRuntime(cctx, s, log); err != nil {
		log.Warn("release host objects of paused sandbox; the leak reclaim will retry", "error", err)
	}
	if err := a.cfg.Layers.Unmount(cctx, id); err != nil {
		log.Warn("unmount root filesystem of paused sandbox", "error", err)
	}
	a.mu.Lock()
	s.rec.State = sandbox.StatePaused
	s.rec.PausedWithMemory = req.Memory
	s.backstopFloor = time.Time{}
	v := a.viewLocked(s)
	a.mu.Unlock()
	if err := a.persist(s); err != nil {
		log.Warn("persist paused state", "error", err)
	}
	log.Info("sandbox paused")
	return v, nil
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
		a.mu.Lock()
		s.rec.State = sandbox.StateRunning
		s.rec.Epoch++
		a.pushBackstopLocked(s)
		a.startWatcherLocked(s)
		a.mu.Unlock()
		if err := a.persist(s); err != nil {
			log.Warn("persist running state after failed pause", "error", err)
		}
		log.Warn("pause failed; sandbox keeps running", "error", cause)
		return fmt.Errorf("sandbox %q: pause failed, the sandbox keeps running: %w", id, errors.Join(cause, errdefs.ErrExhausted))
	}
	a.mu.Lock()
	execID := s.rec.ExecutionID
	a.mu.Unlock()
	klog := log.With("kill_reason", sandbox.KillReason("").String())
	klog.Error("pause failed and the sandbox stopped", "error", cause)
	a.destroy(ctx, s, klog)
	a.emit(Event{Type: EventKilled, SandboxID: id, ExecutionID: execID, At: a.clock.Now()})
	return fmt.Errorf("sandbox %q: pause failed and the sandbox stopped: %w", id, errors.Join(cause, errdefs.ErrUnavailable))
}

// resume implements Service.Resume. A sandbox paused with memory is restored (on a
// new network slot); one paused without it boots again on its writable
// layer and runs the template's start command.
func (a *Agent) resume(ctx context.Context, id string, req ResumeRequest) (*Sandbox, error) {
	s, err := a.lookup(id)
	if err != nil {
		return nil, err
	}
	s.op.Lock()
	defer s.op.Unlock()
	a.mu.Lock()
	if s.gone {
		a.mu.Unlock()
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if s.rec.State != sandbox.StatePaused {
		state := s.rec.State
		a.mu.Unlock()
		return nil, fmt.Errorf("sandbox %q is %s, not paused: %w", id, state, errdefs.ErrConflict)
	}
	prevExec, prevEnd := s.rec.ExecutionID, s.rec.EndAt
	withMemory := s.rec.PausedWithMemory
	execID := req.ExecutionID
	if execID == "" {
		execID = sandbox.NewExecutionID()
	}
	s.rec.ExecutionID = execID
	if !req.EndAt.IsZero() {
		s.rec.EndAt = req.EndAt
	}
	a.mu.Unlock()
	if withMemory {
		if _, ok := a.checkpointer(); !ok {
			a.mu.Lock()
			s.rec.ExecutionID, s.rec.EndAt = prevExec, prevEnd
			a.mu.Unlock()
			return nil, fmt.Errorf("sandbox %q: paused with memory, which driver %s cannot restore: %w", id, a.drv.Name(), errdefs.ErrUnsupported)
		}
	}
	a.reclaimMu.RLock()
	defer a.reclaimMu.RUnlock()
	log := a.log.With("sandbox_id", id, "execution_id", execID, "memory", withMemory)
	m := startMode{layerExists: true, runStartCmd: !withMemory}
	snap := snapshotDir(a.cfg.DataDir, id)
	if withMemory {
		m.restoreDir = snap
	}
	if err := a.bringUp(ctx, s, m, log); err != nil {
		a.mu.Lock()
		s.rec.ExecutionID, s.rec.EndAt = prevExec, prevEnd
		a.mu.Unlock()
		log.Debug("resume failed; the sandbox stays paused", "error", err)
		return nil, fmt.Errorf("sandbox %q: resume: %w", id, err)
	}
	a.mu.Lock()
	s.rec.State = sandbox.StateRunning
	s.rec.Epoch++
	s.rec.StartedAt = a.clock.Now()
	s.rec.PausedWithMemory = false
	a.armBackstopLocked(s)
	a.startWatcherLocked(s)
	v := a.viewLocked(s)
	a.mu.Unlock()
	if err := a.persist(s); err != nil {
		log.Warn("persist resumed state", "error", err)
	}
	if err := os.RemoveAll(snap); err != nil {
		log.Warn("remove used memory snapshot", "error", err)
	}
	log.Info("sandbox resumed", "address", v.Address)
	return v, nil
}

// fork implements Service.Fork: it checkpoints the running sandbox (which keeps
// running) and restores the image as len(req.IDs) new sandboxes, each with
// a copy of the writable layer and its own slot and cgroup. If one copy
// fails, the copies made so far are destroyed.
func (a *Agent) fork(ctx context.Context, id string, req ForkRequest) ([]*Sandbox, error) {
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
	seen := map[string]bool{}
	for _, cid := range req.IDs {
		if !sandbox.ValidID(cid) || seen[cid] || cid == id {
			return nil, fmt.Errorf("sandbox %q: fork: copy id %q: %w", id, cid, errdefs.ErrInvalid)
		}
		seen[cid] = true
	}

	a.mu.Lock()
	switch {
	case a.closed:
		a.mu.Unlock()
		return nil, fmt.Errorf("node agent: %w", errdefs.ErrUnavailable)
	case src.gone:
		a.mu.Unlock()
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	case src.checkpointing:
		a.mu.Unlock()
		return nil, fmt.Errorf("sandbox %q: a checkpoint is already in flight, try again later: %w", id, errdefs.ErrExhausted)
	case src.rec.State != sandbox.StateRunning:
		state := src.rec.State
		a.mu.Unlock()
		return nil, fmt.Errorf("sandbox %q is %s, not running: %w", id, state, errdefs.ErrConflict)
	}
	for _, cid := range req.IDs {
		if _, ok := a.sandboxes[cid]; ok {
			a.mu.Unlock()
			return nil, fmt.Errorf("sandbox %q: fork: copy %q: %w", id, cid, errdefs.ErrAlreadyExists)
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
		r.State, r.Epoch, r.Slot, r.Cgroup, r.RootFS, r.PausedWithMemory = sandbox.StateStarting, 0, nil, "", "", false
		r.EnvVars, r.Metadata = maps.Clone(parent.EnvVars), maps.Clone(parent.Metadata)
		children[i] = &sbx{rec: r}
		children[i].op.Lock()
		a.sandboxes[cid] = children[i]
	}
	src.checkpointing = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		src.checkpointing = false
		a.mu.Unlock()
	}()
	a.reclaimMu.RLock()
	defer a.reclaimMu.RUnlock()
	log := a.log.With("sandbox_id", id, "execution_id", parent.ExecutionID, "copies", len(req.IDs))

	made := 0 // children with a directory and layer
	fail := func(err error) ([]*Sandbox, error) {
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
	src.op.Lock()
	a.mu.Lock()
	alive := !src.gone && src.rec.State == sandbox.StateRunning
	a.mu.Unlock()
	if !alive {
		src.op.Unlock()
		return fail(fmt.Errorf("sandbox stopped: %w", errdefs.ErrConflict))
	}
	if err := os.MkdirAll(img, 0o700); err != nil {
		src.op.Unlock()
		return fail(err)
	}
	if err := ckpt.Checkpoint(ctx, id, img, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		src.op.Unlock()
		return fail(fmt.Errorf("checkpoint: %w", err))
	}
	for _, c := range children {
		cdir := sandboxDir(a.cfg.DataDir, c.rec.ID)
		if err := removeDir(cdir); err != nil {
			src.op.Unlock()
			return fail(err)
		}
		if err := os.MkdirAll(cdir, 0o700); err != nil {
			src.op.Unlock()
			return fail(err)
		}
		made++
		if err := a.persist(c); err != nil {
			src.op.Unlock()
			return fail(err)
		}
		if err := a.cfg.Layers.Copy(ctx, id, c.rec.ID); err != nil {
			src.op.Unlock()
			return fail(fmt.Errorf("copy writable layer for %q: %w", c.rec.ID, err))
		}
	}
	src.op.Unlock()

	// The copies come up in parallel, a few at a time.
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
	for i, err := range errs {
		if err != nil {
			return fail(fmt.Errorf("copy %q: %w", children[i].rec.ID, err))
		}
	}
	out := make([]*Sandbox, 0, len(children))
	for _, c := range children {
		a.mu.Lock()
		c.rec.State = sandbox.StateRunning
		c.rec.Epoch++
		c.rec.StartedAt = a.clock.Now()
		a.armBackstopLocked(c)
		a.startWatcherLocked(c)
		out = append(out, a.viewLocked(c))
		a.mu.Unlock()
		if err := a.persist(c); err != nil {
			log.Warn("persist forked sandbox", "copy_id", c.rec.ID, "error", err)
		}
		c.op.Unlock()
	}
	log.Info("sandbox forked")
	return out, nil
}
