package node

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"

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

// fork implements Service.Fork for h: it checkpoints the running sandbox
// (which keeps running) once and restores that one image as len(req.IDs) new sandboxes,
// forkParallelism at a time, each with a copy of the writable layer and
// its own slot and cgroup. If one copy fails, the copies made so far are
// destroyed. Its phases (logged with "sandbox forked"): lock, checkpoint,
// layers (the copies' layers, made from the source's), restore (all the
// copies) and record.
//
// The fork holds the op of every copy from before the copies join the
// map until it returns (nothing else can act on a copy meanwhile), and
// its own op for the checkpoint and the layer copies only.
func (h *handle) fork(ctx context.Context, req nodeapi.ForkRequest) ([]*nodeapi.Sandbox, error) {
	a, id := h.a, h.id
	ckpt, ok := a.checkpointer()
	if !ok {
		return nil, fmt.Errorf("sandbox %q: fork: driver %s cannot checkpoint memory: %w", id, a.drv.Name(), errdefs.ErrUnsupported)
	}
	if err := validFork(id, req); err != nil {
		return nil, err
	}

	// The copies' op, taken while no one else can reach them.
	children := make([]*handle, len(req.IDs))
	for i, cid := range req.IDs {
		children[i] = &handle{a: a, id: cid}
		children[i].op.Lock()
		defer children[i].op.Unlock()
	}
	parent, err := a.admitFork(h, children, req)
	if err != nil {
		return nil, err
	}
	defer h.setCheckpointing(false)
	log := a.log.With("sandbox_id", id, "execution_id", parent.ExecutionID, "copies", len(req.IDs))

	// The image lives apart from the source, which may be killed while its
	// copies restore.
	img := filepath.Join(forksDir(a.cfg.DataDir), sandbox.HostName(id)+"-"+sandbox.RandomToken(6))
	defer os.RemoveAll(img)
	ph := a.phases("fork")
	if made, err := h.forkImage(ctx, ckpt, img, children, ph); err != nil {
		return nil, forkFailed(ctx, id, children, made, log, err)
	}
	if err := h.restoreCopies(ctx, img, children); err != nil {
		return nil, forkFailed(ctx, id, children, len(children), log, err)
	}
	ph.done("restore")
	out := make([]*nodeapi.Sandbox, 0, len(children))
	for _, c := range children {
		out = append(out, c.markResumed())
		c.watchExit()
		if err := c.persist(); err != nil {
			log.Warn("persist forked sandbox", "copy_id", c.id, "error", err)
		}
	}
	ph.done("record")
	log.Info("sandbox forked", ph.observe(a.phaseDur)...)
	return out, nil
}

// validFork checks the copies' IDs and the lists that go with them.
func validFork(id string, req nodeapi.ForkRequest) error {
	if len(req.IDs) == 0 {
		return fmt.Errorf("sandbox %q: fork: no IDs for the copies: %w", id, errdefs.ErrInvalid)
	}
	if len(req.ExecutionIDs) != 0 && len(req.ExecutionIDs) != len(req.IDs) {
		return fmt.Errorf("sandbox %q: fork: %d execution IDs for %d copies: %w", id, len(req.ExecutionIDs), len(req.IDs), errdefs.ErrInvalid)
	}
	if len(req.EnvdAccessTokens) != 0 && len(req.EnvdAccessTokens) != len(req.IDs) {
		return fmt.Errorf("sandbox %q: fork: %d access tokens for %d copies: %w", id, len(req.EnvdAccessTokens), len(req.IDs), errdefs.ErrInvalid)
	}
	seen := map[string]bool{}
	for _, cid := range req.IDs {
		if !sandbox.ValidID(cid) || seen[cid] || cid == id {
			return fmt.Errorf("sandbox %q: fork: copy id %q: %w", id, cid, errdefs.ErrInvalid)
		}
		seen[cid] = true
	}
	return nil
}

// admitFork checks that src can be forked into children (new handles,
// their op held by the caller) now, marks src's checkpoint in flight,
// gives each copy its record and registers the copies. It returns src's
// record.
func (a *Agent) admitFork(src *handle, children []*handle, req nodeapi.ForkRequest) (record, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return record{}, fmt.Errorf("node agent: %w", errdefs.ErrUnavailable)
	}
	if err := src.checkpointable(); err != nil {
		return record{}, err
	}
	for _, c := range children {
		if _, ok := a.sandboxes[c.id]; ok {
			return record{}, fmt.Errorf("sandbox %q: fork: copy %q: %w", src.id, c.id, errdefs.ErrAlreadyExists)
		}
	}
	parent, err := src.admitCheckpoint()
	if err != nil {
		return record{}, err
	}
	for i, c := range children {
		r := parent
		r.ID = c.id
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
		c.rec = r // no one else has c before it joins the map, below
		a.sandboxes[c.id] = c
	}
	return parent, nil
}

// forkImage checkpoints running sandbox h into img, leaving it running,
// and gives every copy a directory, a state record and a copy of h's
// writable layer, all under h.op. It returns how many copies got a
// directory (those the failure must destroy).
func (h *handle) forkImage(ctx context.Context, ckpt driver.Checkpointer, img string, children []*handle, ph *phaseTimer) (made int, err error) {
	a := h.a
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	if st := h.get(); st.gone || st.rec.State != sandbox.StateRunning {
		return 0, fmt.Errorf("sandbox stopped: %w", errdefs.ErrConflict)
	}
	ph.done("lock")
	if err := os.MkdirAll(img, 0o700); err != nil {
		return 0, err
	}
	if err := ckpt.Checkpoint(ctx, h.id, img, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	ph.done("checkpoint")
	defer ph.done("layers")
	// The copies' directories and layers are host objects of sandboxes
	// in the map: no reclaim between here and their restore takes them.
	a.reclaimMu.RLock()
	defer a.reclaimMu.RUnlock()
	for _, c := range children {
		if err := c.removeDir(); err != nil {
			return made, err
		}
		if err := os.MkdirAll(sandboxDir(a.cfg.DataDir, c.id), 0o700); err != nil {
			return made, err
		}
		made++
		if err := c.persist(); err != nil {
			return made, err
		}
		if err := a.cfg.Layers.Copy(ctx, h.id, c.id); err != nil {
			return made, fmt.Errorf("copy writable layer for %q: %w", c.id, err)
		}
	}
	return made, nil
}

// restoreCopies brings the copies of h up from img, its fork's image, in
// parallel, forkParallelism at a time; it returns the first copy's
// failure.
func (h *handle) restoreCopies(ctx context.Context, img string, children []*handle) error {
	a, id := h.a, h.id
	a.reclaimMu.RLock()
	defer a.reclaimMu.RUnlock()
	errs := make([]error, len(children))
	sem := make(chan struct{}, forkParallelism)
	var wg sync.WaitGroup
	for i, c := range children {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			clog := a.log.With("sandbox_id", c.id, "execution_id", c.get().rec.ExecutionID, "forked_from", id)
			errs[i] = c.bringUp(ctx, startMode{restoreDir: img, layerExists: true}, clog)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("copy %q: %w", children[i].id, err)
		}
	}
	return nil
}

// forkFailed destroys the copies of a failed fork of sandbox id (the
// first made of them have a directory and a layer; the fork holds their
// op) and returns the fork's error.
func forkFailed(ctx context.Context, id string, children []*handle, made int, log *slog.Logger, err error) error {
	for i, c := range children {
		clog := log.With("copy_id", c.id, "kill_reason", sandbox.KillReason("").String())
		if i < made {
			c.destroy(ctx, clog)
		} else {
			c.a.forget(c)
		}
	}
	return fmt.Errorf("sandbox %q: fork: %w", id, err)
}
