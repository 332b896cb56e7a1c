package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Kinds of reclaimed objects, the values of the kind label of
// sandbox_leaked_objects_reclaimed_total (the layers add their own).
const (
	KindContainer = "container"
	KindCgroup    = "cgroup"
	KindNetwork   = "network"
	KindStateDir  = "state_dir"
	KindForkImage = "fork_image"
)

// recover reads the state records under DataDir: running sandboxes whose
// runtime container still runs are adopted, paused ones are kept, and every
// host object that belongs to none of them is reclaimed. Three kinds of
// sandbox own host objects: running ones (all of them), paused ones (their
// layer, state dir and memory image), and paused ones that kept their
// slot, cgroup and mount (keep.go), which the earlier agent did not
// release: those objects and their prepared runtime container are
// reclaimed, the rest stays as for any paused sandbox.
func (a *Agent) recover(ctx context.Context) error {
	entries, err := os.ReadDir(sandboxesDir(a.cfg.DataDir))
	if err != nil {
		return fmt.Errorf("node data dir: %w", err)
	}
	ids, err := a.drv.List(ctx)
	if err != nil {
		return fmt.Errorf("list runtime containers: %w", err)
	}
	live := map[string]bool{}
	for _, id := range ids {
		live[id] = true
	}
	running := map[string]bool{} // runtime objects to keep
	known := map[string]bool{}   // layers and state dirs to keep
	type lostSandbox struct {
		ev  nodeapi.Event
		own bool
	}
	var lost []lostSandbox
	for _, e := range entries {
		id, ok := strings.CutPrefix(e.Name(), "sbx-")
		if !ok || !e.IsDir() || !sandbox.ValidID(id) {
			continue
		}
		dir := filepath.Join(sandboxesDir(a.cfg.DataDir), e.Name())
		log := a.log.With("sandbox_id", id)
		r, err := readRecord(dir)
		switch {
		case errors.Is(err, errNewerRecord):
			// Written by a newer agent: touch nothing of it.
			log.Warn("state record of a newer agent; leaving the sandbox alone", "error", err)
			running[id], known[id] = true, true
			continue
		case errdefs.IsNotFound(err):
			log.Info("state dir without a record (a create cut short); its objects are reclaimed")
			continue
		case err != nil:
			log.Warn("unreadable state record; the sandbox's objects are reclaimed", "error", err)
			continue
		}
		if r.Internal {
			log.Info("temporary sandbox of an unfinished template snapshot; its objects are reclaimed")
			continue
		}
		switch r.State {
		case sandbox.StatePaused:
			known[id] = true
			h := a.newHandle(*r, false)
			if r.Slot != nil || r.Cgroup != "" || r.RootFS != "" {
				// It kept its host objects (keep.go): not running, so the
				// reclaim below takes them and the prepared container; its
				// image and layer stay, and it resumes the slow way.
				h.clearHostObjects()
			}
			// Under the agent's lock: the sandboxes adopted before it may
			// already be exiting (their watchers and backstops run).
			if err := a.register(h); err != nil {
				return err
			}
			if r.Slot != nil || r.Cgroup != "" || r.RootFS != "" {
				if err := h.persist(); err != nil {
					log.Warn("persist paused sandbox without its kept host objects", "error", err)
				}
				log.Info("paused sandbox kept host objects; they are reclaimed", "execution_id", r.ExecutionID)
			}
			log.Info("recovered paused sandbox", "execution_id", r.ExecutionID, "memory", r.PausedWithMemory)
		case sandbox.StateRunning, sandbox.StatePausing:
			if ev, ok := a.kills.get(id); ok && ev.ExecutionID == r.ExecutionID {
				// The earlier agent had decided this kill and stopped
				// before it was done: it is finished now, as recorded.
				log.Info("sandbox killed by the earlier agent, which stopped before its objects were gone; they are reclaimed",
					"execution_id", r.ExecutionID, "kill_reason", ev.Reason.String())
				continue
			}
			if live[id] {
				if err := a.adopt(ctx, r); err == nil {
					running[id], known[id] = true, true
					continue
				} else {
					log.Warn("cannot adopt running sandbox; it is stopped", "execution_id", r.ExecutionID, "error", err)
				}
			}
			// With its cgroup still there (the agent restarted, not the
			// machine), the sandbox ended by itself: the node's own kill,
			// kept until acknowledged. Without (a reboot: nothing
			// survived), the control plane tells it from the new boot ID.
			reason, own := sandbox.KillExited, false
			if cg, err := a.cfg.Cgroups.Open(ctx, sandbox.HostName(id)); err == nil {
				reason, own = exitReason(ctx, cg, false), true
			}
			log.Info("sandbox stopped while the agent was away; its objects are reclaimed", "execution_id", r.ExecutionID, "kill_reason", reason.String())
			lost = append(lost, lostSandbox{nodeapi.Event{Type: nodeapi.EventExited, SandboxID: id, ExecutionID: r.ExecutionID, Reason: reason, At: a.clock.Now()}, own})
		default:
			// starting or killed: an operation the agent did not finish.
			log.Info("sandbox left half made; its objects are reclaimed", "state", r.State)
		}
	}
	a.reclaim(ctx, running, known)
	// Images of forks an earlier agent did not finish.
	if entries, err := os.ReadDir(forksDir(a.cfg.DataDir)); err == nil {
		n := 0
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(forksDir(a.cfg.DataDir), e.Name())); err == nil {
				n++
			}
		}
		a.countReclaimed(KindForkImage, n)
	}
	for _, l := range lost {
		if l.own {
			a.journalKill(l.ev, a.log.With("sandbox_id", l.ev.SandboxID, "kill_reason", l.ev.Reason.String()))
		}
		a.countKill(l.ev.Reason)
		a.events.emit(l.ev)
	}
	return nil
}

// adopt takes back a sandbox that kept running while no agent ran.
func (a *Agent) adopt(ctx context.Context, r *record) error {
	// The driver's first look at a sandbox it did not start may start its
	// exit helper: from a thread that lives on.
	var st driver.Status
	var err error
	if serr := a.spawn.do(func() { st, err = a.drv.Status(ctx, r.ID) }); serr != nil {
		return serr
	}
	if err != nil {
		return err
	}
	if st.State != driver.StateRunning && st.State != driver.StateFrozen {
		return fmt.Errorf("runtime container is %s: %w", st.State, errdefs.ErrConflict)
	}
	if r.Slot == nil {
		return fmt.Errorf("no network slot recorded: %w", errdefs.ErrInvalid)
	}
	if err := a.cfg.Net.Adopt(ctx, r.Slot); err != nil {
		return fmt.Errorf("adopt network slot: %w", err)
	}
	cg, err := a.cfg.Cgroups.Open(ctx, r.Cgroup)
	if err != nil {
		return fmt.Errorf("open cgroup: %w", err)
	}
	if st.State == driver.StateFrozen {
		if f, ok := a.drv.(driver.Freezer); ok {
			if err := f.Thaw(ctx, r.ID); err != nil {
				return fmt.Errorf("thaw: %w", err)
			}
		}
	}
	h := a.newHandle(*r, false)
	h.cg = cg
	if r.State == sandbox.StatePausing {
		// The pause did not finish; the sandbox still runs.
		h.rec.State = sandbox.StateRunning
		h.rec.Epoch++
	}
	if err := a.register(h); err != nil {
		return err
	}
	h.markAdopted()
	h.watchExit()
	if err := h.persist(); err != nil {
		a.log.Warn("persist adopted sandbox", "sandbox_id", r.ID, "error", err)
	}
	a.log.Info("adopted running sandbox", "sandbox_id", r.ID, "execution_id", r.ExecutionID, "epoch", h.get().rec.Epoch)
	return nil
}

// reclaim destroys host objects whose sandbox is not in running (runtime
// containers, cgroups, network objects, mounts) or not in known (layers,
// state directories), counting them by kind. Each object's owner is checked
// from its name before it is touched. What cannot be reclaimed is logged and
// tried again by the next pass.
func (a *Agent) reclaim(ctx context.Context, running, known map[string]bool) {
	var errs []error
	ids, err := a.drv.List(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("list runtime containers: %w", err))
	}
	n := 0
	for _, id := range ids {
		if running[id] {
			continue
		}
		_ = a.drv.Kill(ctx, id)
		if err := a.drv.Delete(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("runtime container %q: %w", id, err))
			continue
		}
		a.log.Info("reclaimed leaked runtime container", "sandbox_id", id)
		n++
	}
	a.countReclaimed(KindContainer, n)

	names, err := a.cfg.Cgroups.List(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("list cgroups: %w", err))
	}
	n = 0
	for _, name := range names {
		id, ok := strings.CutPrefix(name, "sbx-")
		if !ok || running[id] {
			continue
		}
		cg, err := a.cfg.Cgroups.Open(ctx, name)
		if errdefs.IsNotFound(err) {
			continue
		}
		if err == nil {
			err = cg.KillAll(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroup %q: %w", name, err))
			continue
		}
		a.log.Info("reclaimed leaked cgroup", "sandbox_id", id, "cgroup", name)
		n++
	}
	a.countReclaimed(KindCgroup, n)

	n, err = a.cfg.Net.ReclaimLeaked(ctx, running)
	if err != nil {
		errs = append(errs, fmt.Errorf("network objects: %w", err))
	}
	if n > 0 {
		a.log.Info("reclaimed leaked network objects", "count", n)
	}
	a.countReclaimed(KindNetwork, n)

	counts, err := a.cfg.Layers.ReclaimLeaked(ctx, running, known)
	if err != nil {
		errs = append(errs, fmt.Errorf("root filesystems: %w", err))
	}
	for kind, n := range counts {
		if n > 0 {
			a.log.Info("reclaimed leaked root filesystem objects", "kind", kind, "count", n)
		}
		a.countReclaimed(kind, n)
	}

	entries, err := os.ReadDir(sandboxesDir(a.cfg.DataDir))
	if err != nil {
		errs = append(errs, fmt.Errorf("state dirs: %w", err))
	}
	n = 0
	for _, e := range entries {
		id, ok := strings.CutPrefix(e.Name(), "sbx-")
		if !ok || !sandbox.ValidID(id) || known[id] {
			continue
		}
		if err := removeDir(filepath.Join(sandboxesDir(a.cfg.DataDir), e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("state dir %q: %w", e.Name(), err))
			continue
		}
		a.log.Info("reclaimed leaked state dir", "sandbox_id", id)
		n++
	}
	a.countReclaimed(KindStateDir, n)
	if len(errs) > 0 {
		a.log.Warn("some leaked objects could not be reclaimed", "error", errors.Join(errs...))
	}
}

// removeDir removes a sandbox's state directory, unless something is
// mounted below it: then nothing is removed (a later pass retries, once the
// mount's owner released it).
func removeDir(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(mps) > 0 {
		return fmt.Errorf("still mounted below it: %v: %w", mps, errdefs.ErrConflict)
	}
	return os.RemoveAll(dir)
}
