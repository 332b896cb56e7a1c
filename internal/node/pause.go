package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// snapshotDir is where a paused sandbox's memory image lives.
func snapshotDir(dataDir, id string) string {
	return filepath.Join(sandboxDir(dataDir, id), "snapshot")
}

// pause implements Service.Pause for h.
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
func (h *handle) pause(ctx context.Context, req nodeapi.PauseRequest) (*nodeapi.Sandbox, error) {
	a := h.a
	var ckpt driver.Checkpointer
	if req.Memory {
		c, ok := a.checkpointer()
		if !ok {
			return nil, fmt.Errorf("sandbox %q: pause with memory: driver %s cannot checkpoint memory; pause without memory (filesystem only) instead: %w", h.id, a.drv.Name(), errdefs.ErrUnsupported)
		}
		ckpt = c
	}
	if err := h.admitPause(req); err != nil {
		return nil, err
	}
	if req.Memory {
		defer h.setCheckpointing(false)
	}
	v, k, log, err := h.pauseLocked(ctx, req, ckpt)
	if err != nil {
		return nil, err
	}
	if k != nil {
		// The preparation goes on after the pause has answered; every
		// operation of h waits for it (awaitPrepare).
		h.startPrepare(k, log)
	}
	return v, nil
}

// pauseLocked does the pause under h.op. It returns the keep it began
// (keep.go), whose preparation the caller starts.
func (h *handle) pauseLocked(ctx context.Context, req nodeapi.PauseRequest, ckpt driver.Checkpointer) (*nodeapi.Sandbox, *keptObjects, *slog.Logger, error) {
	a := h.a
	ph := a.phases("pause")
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	execID, err := h.markPausing()
	if err != nil {
		return nil, nil, nil, err
	}
	ph.done("lock")
	log := a.log.With("sandbox_id", h.id, "execution_id", execID, "memory", req.Memory)
	if err := h.persist(); err != nil {
		log.Warn("persist pausing state", "error", err)
	}

	snap := snapshotDir(a.cfg.DataDir, h.id)
	if err := os.RemoveAll(snap); err != nil {
		return nil, nil, nil, h.pauseFailed(ctx, log, fmt.Errorf("clear snapshot dir: %w", err))
	}
	if req.Memory {
		if err := os.MkdirAll(snap, 0o700); err != nil {
			return nil, nil, nil, h.pauseFailed(ctx, log, fmt.Errorf("snapshot dir: %w", err))
		}
		if err := ckpt.Checkpoint(ctx, h.id, snap, driver.CheckpointOptions{}); err != nil {
			return nil, nil, nil, h.pauseFailed(ctx, log, fmt.Errorf("checkpoint: %w", err))
		}
		ph.done("checkpoint")
	} else {
		h.syncGuest(ctx, log)
		ph.done("sync")
	}

	cctx := context.WithoutCancel(ctx)
	var k *keptObjects
	if req.Memory {
		if k = a.beginKeep(h); k == nil {
			if err := h.releaseCheckpointed(cctx, log); err != nil {
				log.Warn("release host objects of paused sandbox; the leak reclaim will retry", "error", err)
			}
			ph.done("release")
		}
	} else {
		if err := h.releaseRuntime(cctx, log, ph); err != nil {
			log.Warn("release host objects of paused sandbox; the leak reclaim will retry", "error", err)
		}
		h.unmountPaused(cctx, log)
		ph.done("unmount")
	}
	v := h.markPaused(req.Memory)
	if err := h.persist(); err != nil {
		log.Warn("persist paused state", "error", err)
	}
	ph.done("record")
	log.Info("sandbox paused", append([]any{"kept", k != nil}, ph.observe(a.phaseDur)...)...)
	return v, k, log, nil
}

// releaseCheckpointed releases the host objects of h once a checkpoint
// has stopped it: its runtime container, cgroup, network slot and root
// filesystem's mount, all at once (nothing runs in them any more). It goes
// on past errors and returns them joined.
func (h *handle) releaseCheckpointed(ctx context.Context, log *slog.Logger) error {
	a := h.a
	st := h.get()
	id, slot, cg, cgName := h.id, st.rec.Slot, st.cg, st.rec.Cgroup
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
	wg.Go(func() { h.unmountPaused(ctx, log) })
	wg.Wait()
	h.clearHostObjects()
	return errors.Join(errs...)
}

func (h *handle) unmountPaused(ctx context.Context, log *slog.Logger) {
	if err := h.a.cfg.Layers.Unmount(ctx, h.id); err != nil {
		log.Warn("unmount root filesystem of paused sandbox", "error", err)
	}
}

// admitPause checks that h can be paused now and, for a pause with
// memory, marks its checkpoint in flight.
func (h *handle) admitPause(req nodeapi.PauseRequest) error {
	a := h.a
	var free uint64
	lowDisk := false
	if req.Memory && a.cfg.MinFreeDiskBytes > 0 {
		n, err := a.cfg.FreeDisk(a.cfg.DataDir)
		free, lowDisk = n, err == nil && n < uint64(a.cfg.MinFreeDiskBytes)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.id
	switch {
	case h.gone:
		return a.goneErr(id)
	case h.checkpointing:
		h.pushBackstopLocked()
		a.log.Info("pause refused: a checkpoint of this sandbox is in flight; backstop pushed forward", "sandbox_id", id)
		return fmt.Errorf("sandbox %q: a checkpoint is already in flight, try again later: %w", id, errdefs.ErrExhausted)
	case h.rec.State != sandbox.StateRunning:
		return fmt.Errorf("sandbox %q is %s, not running: %w", id, h.rec.State, errdefs.ErrConflict)
	case req.ExecutionID != "" && req.ExecutionID != h.rec.ExecutionID:
		return fmt.Errorf("sandbox %q: pause for execution %q, which is no longer current: %w", id, req.ExecutionID, errdefs.ErrConflict)
	}
	if lowDisk {
		h.pushBackstopLocked()
		a.log.Info("pause refused: disk low; backstop pushed forward", "sandbox_id", id, "free_bytes", free)
		return fmt.Errorf("sandbox %q: not enough disk for a memory snapshot (%d bytes free), try again later: %w", id, free, errdefs.ErrExhausted)
	}
	if req.Memory {
		h.checkpointing = true
	}
	return nil
}

// checkpointable checks that h can be checkpointed now: it runs and no
// other checkpoint of it is in flight.
func (h *handle) checkpointable() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.checkpointableLocked()
}

func (h *handle) checkpointableLocked() error {
	switch {
	case h.gone:
		return h.a.goneErr(h.id)
	case h.checkpointing:
		return fmt.Errorf("sandbox %q: a checkpoint is already in flight, try again later: %w", h.id, errdefs.ErrExhausted)
	case h.rec.State != sandbox.StateRunning:
		return fmt.Errorf("sandbox %q is %s, not running: %w", h.id, h.rec.State, errdefs.ErrConflict)
	}
	return nil
}

// admitCheckpoint marks a checkpoint of running sandbox h in flight (a
// fork's or a snapshot's), refusing one while another is, and returns
// h's record.
func (h *handle) admitCheckpoint() (record, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.checkpointableLocked(); err != nil {
		return record{}, err
	}
	h.checkpointing = true
	return h.rec, nil
}

// markPausing moves h (whose op the caller holds) to pausing, in a new
// epoch, and returns its execution ID; it fails when h is no longer
// running.
func (h *handle) markPausing() (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return "", h.a.goneErr(h.id)
	}
	if h.rec.State != sandbox.StateRunning {
		return "", fmt.Errorf("sandbox %q is %s, not running: %w", h.id, h.rec.State, errdefs.ErrConflict)
	}
	h.rec.State = sandbox.StatePausing
	h.rec.Epoch++
	h.stopTimersLocked()
	return h.rec.ExecutionID, nil
}

// markPaused moves h to paused and returns its view.
func (h *handle) markPaused(memory bool) *nodeapi.Sandbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.State = sandbox.StatePaused
	h.rec.PausedWithMemory = memory
	h.backstopFloor = time.Time{}
	return h.viewLocked()
}

// syncGuest asks the guest to flush its file systems before a
// filesystem-only pause kills it; best effort.
func (h *handle) syncGuest(ctx context.Context, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := h.a.drv.Exec(sctx, h.id, driver.Process{Args: []string{"/bin/sync"}}); err != nil {
		log.Debug("sync guest file systems before pause", "error", err)
	}
}

// pauseFailed handles a pause that failed after it started (the caller
// holds h.op): a sandbox that still runs goes back to running (the pause
// is refused with ErrExhausted, so that the control plane retries and
// degrades, and the backstop is pushed); one that stopped is destroyed.
func (h *handle) pauseFailed(ctx context.Context, log *slog.Logger, cause error) error {
	a := h.a
	id := h.id
	st, err := a.drv.Status(ctx, id)
	if err == nil && (st.State == driver.StateRunning || st.State == driver.StateFrozen) {
		h.markRunningAgain()
		h.watchExit()
		if err := h.persist(); err != nil {
			log.Warn("persist running state after failed pause", "error", err)
		}
		log.Warn("pause failed; sandbox keeps running", "error", cause)
		return fmt.Errorf("sandbox %q: pause failed, the sandbox keeps running: %w", id, errors.Join(cause, errdefs.ErrExhausted))
	}
	hs := h.get()
	klog := log.With("kill_reason", sandbox.KillReason("").String())
	klog.Error("pause failed and the sandbox stopped", "error", cause)
	h.ownKill(ctx, nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: id, ExecutionID: hs.rec.ExecutionID, At: a.clock.Now()}, hs.internal, klog)
	return fmt.Errorf("sandbox %q: pause failed and the sandbox stopped: %w", id, errors.Join(cause, errdefs.ErrUnavailable))
}

// markRunningAgain puts h, whose pause failed with the sandbox still
// running, back to running in a new epoch, its backstop pushed forward.
func (h *handle) markRunningAgain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.State = sandbox.StateRunning
	h.rec.Epoch++
	h.pushBackstopLocked()
}

// resume implements Service.Resume for h. A sandbox paused with memory is
// restored (on a new network slot, or into the container prepared in the
// slot, cgroup and mount it kept: keep.go); one paused without it boots
// again on its writable layer and runs the template's start command. Its
// phases (logged with "sandbox resumed"): lock (which waits for a
// preparation in flight), bringUp's (cgroup, layer, slot, none of them for
// a prepared sandbox; restore or start, health, init, start_cmd), record
// and cleanup (the used image).
func (h *handle) resume(ctx context.Context, req nodeapi.ResumeRequest) (*nodeapi.Sandbox, error) {
	a := h.a
	id := h.id
	ph := a.phases("resume")
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	prev, execID, err := h.beginResume(req)
	if err != nil {
		return nil, err
	}
	ph.done("lock")
	if prev.PausedWithMemory {
		if _, ok := a.checkpointer(); !ok {
			h.undoResume(prev)
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
	m.prepared = h.takeKept(ctx, log)
	err = h.bringUp(ctx, m, log)
	if err != nil && m.prepared {
		// bringUp released the kept objects: try the slow way once.
		log.Warn("restore into the prepared sandbox failed; resuming the slow way", "error", err)
		h.clearHostObjects()
		m.prepared = false
		err = h.bringUp(ctx, m, log)
	}
	if err != nil && m.restoreDir != "" && len(prev.Volumes) > 0 && !errdefs.IsUnsupported(err) && ctx.Err() == nil {
		m = h.volumeResumeFallback(ph, log, err)
		err = h.bringUp(ctx, m, log)
	}
	if err != nil {
		h.undoResume(prev)
		log.Debug("resume failed; the sandbox stays paused", "error", err)
		return nil, fmt.Errorf("sandbox %q: resume: %w", id, err)
	}
	v := h.markResumed()
	h.watchExit()
	if err := h.persist(); err != nil {
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

// beginResume checks that h (whose op the caller holds) is paused and
// gives it the resume's execution ID and end; it returns the record as it
// was, for undoResume, and the new execution ID.
func (h *handle) beginResume(req nodeapi.ResumeRequest) (record, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.rec
	if h.gone {
		return prev, "", h.a.goneErr(h.id)
	}
	if h.rec.State != sandbox.StatePaused {
		return prev, "", fmt.Errorf("sandbox %q is %s, not paused: %w", h.id, h.rec.State, errdefs.ErrConflict)
	}
	execID := req.ExecutionID
	if execID == "" {
		execID = sandbox.NewExecutionID()
	}
	h.rec.ExecutionID = execID
	if !req.EndAt.IsZero() {
		h.rec.EndAt = req.EndAt
	}
	if !h.rec.PausedWithMemory {
		// A fresh boot: nothing of the first boot's mounts to match.
		h.rec.GuestMemoryMB = 0
	}
	return prev, execID, nil
}

// undoResume gives h back the execution ID, end and boot memory it had
// before a resume that failed (it stays paused).
func (h *handle) undoResume(prev record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.ExecutionID, h.rec.EndAt, h.rec.GuestMemoryMB = prev.ExecutionID, prev.EndAt, prev.GuestMemoryMB
}
