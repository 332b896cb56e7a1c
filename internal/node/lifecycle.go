package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// startMode says how bringUp starts a sandbox.
type startMode struct {
	// restoreDir is a memory image to restore; empty means a cold start.
	restoreDir string
	// layerExists mounts the sandbox's existing writable layer (resume,
	// fork child) instead of creating one.
	layerExists bool
	// runStartCmd runs the template's start command after envd is ready.
	runStartCmd bool
	// savedLayer, when set, is the saved layer (of a template snapshot)
	// that the new writable layer copies.
	savedLayer string
	// prepared restores restoreDir into the runtime container made while
	// the sandbox was paused, in the slot, cgroup and root filesystem it
	// kept (keep.go): no host object is made.
	prepared bool
	// background makes the sandbox at refillCPUWeight, so that its start
	// yields the CPUs to user sandboxes (the agent's internal ones: pool
	// refills, template snapshots).
	background bool
	// phases, when set, times bringUp's steps: cgroup, layer, slot (what
	// is left of the network slot's making, which runs beside the other
	// two), start (or restore), health, init and start_cmd.
	phases *phaseTimer
}

// refillCPUWeight is the CPU weight (cgroup.CPUWeighter) of a sandbox
// made in the background: on a busy host its start gets about 1 % of
// what a user sandbox's does (cgroup v1: cpu.shares 10 against 1024).
const refillCPUWeight = 1

// Create implements Service.
func (a *Agent) Create(ctx context.Context, req nodeapi.CreateRequest) (*nodeapi.Sandbox, error) {
	start := a.clock.Now()
	// A warm pool member was started without volumes.
	if len(req.Volumes) == 0 {
		if v, ok := a.claim(ctx, req); ok {
			a.observeOp("create", start, nil)
			return v, nil
		}
	}
	v, err := a.create(ctx, req, false)
	a.observeOp("create", start, err)
	return v, err
}

// create makes a sandbox; an internal one (a pool member, a template
// snapshot's) is not listed, reports no events and is made in the
// background (startMode.background).
func (a *Agent) create(ctx context.Context, req nodeapi.CreateRequest, internal bool) (*nodeapi.Sandbox, error) {
	if !sandbox.ValidID(req.ID) {
		return nil, fmt.Errorf("sandbox id %q: %w", req.ID, errdefs.ErrInvalid)
	}
	if req.Template.RootFS == "" && req.Template.SnapshotDir == "" {
		return nil, fmt.Errorf("sandbox %q: template %q has no root filesystem on this node: %w", req.ID, req.Template.ID, errdefs.ErrInvalid)
	}
	if err := nodeapi.CheckVolumeMounts(req.Volumes); err != nil {
		return nil, err
	}
	var snap *snapshotMeta
	if req.Template.SnapshotDir != "" {
		if _, ok := a.checkpointer(); !ok {
			return nil, fmt.Errorf("sandbox %q: template %q starts from a memory snapshot, which driver %s cannot restore: %w", req.ID, req.Template.ID, a.drv.Name(), errdefs.ErrUnsupported)
		}
		m, err := readSnapshotMeta(req.Template.SnapshotDir)
		if err != nil {
			return nil, fmt.Errorf("sandbox %q: %w", req.ID, err)
		}
		if err := checkSnapshotVolumes(m, req.Template.ID, req.Volumes); err != nil {
			return nil, err
		}
		snap = m
	}
	execID := req.ExecutionID
	if execID == "" {
		execID = sandbox.NewExecutionID()
	}
	h := a.newHandle(record{
		ID:          req.ID,
		ExecutionID: execID,
		TeamID:      req.TeamID,
		Template:    req.Template,
		State:       sandbox.StateStarting,
		EndAt:       req.EndAt,
		Resources:   a.resources(req.Resources),
		Network:     clonePolicy(req.Network),
		EnvVars:     maps.Clone(req.EnvVars),
		Metadata:    maps.Clone(req.Metadata),
		Volumes:     slices.Clone(req.Volumes),
		EnvdVersion: EnvdVersion,
		AccessToken: req.EnvdAccessToken,
		InitToken:   sandbox.RandomToken(32),
		Internal:    internal,
	}, internal)
	if snap != nil {
		// The image's envd was started with the snapshot sandbox's token.
		h.rec.InitToken = snap.InitToken
	}
	h.op.Lock()
	defer h.op.Unlock()
	if err := a.register(h); err != nil {
		return nil, err
	}
	a.reclaimMu.RLock()
	defer a.reclaimMu.RUnlock()

	log := a.log.With("sandbox_id", req.ID, "execution_id", execID, "template_id", req.Template.ID, "team_id", req.TeamID)
	fail := func(err error) (*nodeapi.Sandbox, error) {
		a.forget(h)
		if rmErr := h.removeDir(); rmErr != nil {
			log.Warn("remove state dir of failed create", "error", rmErr)
		}
		log.Debug("create failed", "error", err)
		return nil, fmt.Errorf("sandbox %q: create: %w", req.ID, err)
	}
	// A directory without a sandbox in memory is a leftover: replace it.
	if err := h.removeDir(); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(sandboxDir(a.cfg.DataDir, req.ID), 0o700); err != nil {
		return fail(err)
	}
	if err := h.persist(); err != nil {
		return fail(err)
	}
	m := startMode{runStartCmd: true}
	if snap != nil {
		m = startMode{restoreDir: req.Template.SnapshotDir, savedLayer: snap.Layer}
	}
	m.background = internal
	if err := h.bringUp(ctx, m, log); err != nil {
		return fail(err)
	}
	v := h.markStarted(req)
	h.watchExit()
	if err := h.persist(); err != nil {
		log.Warn("persist state of new sandbox", "error", err)
	}
	log.Info("sandbox created", "address", v.Address)
	return v, nil
}

// endAt is the end time of a sandbox of req that became ready at ready:
// ready plus req.Timeout when it is given, req.EndAt otherwise.
func endAt(req nodeapi.CreateRequest, ready time.Time) time.Time {
	if req.Timeout > 0 {
		return ready.Add(req.Timeout)
	}
	return req.EndAt
}

func (a *Agent) resources(r sandbox.Resources) sandbox.Resources {
	d := a.cfg.DefaultResources
	if r.VCPUs <= 0 {
		r.VCPUs = d.VCPUs
	}
	if r.MemoryMB <= 0 {
		r.MemoryMB = d.MemoryMB
	}
	if r.DiskMB <= 0 {
		r.DiskMB = d.DiskMB
	}
	if r.Pids <= 0 {
		r.Pids = d.Pids
	}
	return r
}

func (a *Agent) checkpointer() (driver.Checkpointer, bool) {
	c, ok := a.drv.(driver.Checkpointer)
	if !ok || !a.drv.Capabilities().MemoryCheckpoint {
		return nil, false
	}
	return c, true
}

// bringUp makes the host objects of h (network slot, cgroup, root
// filesystem), starts or restores it in the driver, initialises envd and
// runs the start command. On success the objects are recorded in h; on
// failure everything it made is undone (a resumed layer is unmounted, not
// destroyed).
func (h *handle) bringUp(ctx context.Context, m startMode, log *slog.Logger) (err error) {
	a := h.a
	st := h.get()
	r, keptCg := st.rec, st.cg
	id := h.id
	var undo []func()
	cctx := context.WithoutCancel(ctx)
	if m.prepared && (r.Slot == nil || keptCg == nil || r.RootFS == "") {
		return fmt.Errorf("prepared sandbox without its slot, cgroup or root filesystem: %w", errdefs.ErrConflict)
	}

	// The network slot is made while the cgroup and the root filesystem
	// are: they do not depend on each other. waitSlot joins it (and
	// registers its undo) before anything needs it, or before a failure
	// undoes what was made.
	slotc := make(chan error, 1)
	var slot *netslot.Slot
	if m.prepared {
		slot = r.Slot
		slotc <- nil
	} else {
		go func() {
			var aerr error
			slot, aerr = a.cfg.Net.Acquire(ctx, id, r.Network)
			slotc <- aerr
		}()
	}
	slotDone := false
	waitSlot := func() error {
		if slotDone {
			return nil
		}
		slotDone = true
		if err := <-slotc; err != nil {
			return fmt.Errorf("network slot: %w", err)
		}
		undo = append(undo, func() {
			if err := a.cfg.Net.Release(cctx, slot); err != nil {
				log.Warn("undo: release network slot", "error", err)
			}
		})
		return nil
	}
	defer func() {
		if err == nil {
			return
		}
		_ = waitSlot()
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()

	cgName := sandbox.HostName(id)
	cg, err := keptCg, error(nil)
	if !m.prepared {
		cg, err = a.createCgroup(ctx, cgName, r.Resources)
	}
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	undo = append(undo, func() {
		if err := cg.KillAll(cctx); err != nil {
			log.Warn("undo: remove cgroup", "error", err)
		}
	})
	if m.background {
		if w, ok := cg.(cgroup.CPUWeighter); ok {
			if err := w.SetCPUWeight(ctx, refillCPUWeight); err != nil {
				log.Debug("background sandbox keeps the default CPU weight", "error", err)
			}
		}
	}
	if !m.prepared {
		m.phases.done("cgroup")
	}

	lower := r.Template.RootFS
	var root string
	switch {
	case m.prepared:
		root = r.RootFS
		undo = append(undo, func() {
			if err := a.cfg.Layers.Unmount(cctx, id); err != nil {
				log.Warn("undo: unmount root filesystem", "error", err)
			}
		})
	case m.savedLayer != "":
		root, err = a.cfg.Layers.CreateFrom(ctx, id, m.savedLayer, lower)
		undo = append(undo, func() {
			if err := a.cfg.Layers.Destroy(cctx, id); err != nil {
				log.Warn("undo: destroy root filesystem", "error", err)
			}
		})
	case m.layerExists:
		root, err = a.cfg.Layers.Mount(ctx, id, lower)
		undo = append(undo, func() {
			if err := a.cfg.Layers.Unmount(cctx, id); err != nil {
				log.Warn("undo: unmount root filesystem", "error", err)
			}
		})
	default:
		root, err = a.cfg.Layers.Create(ctx, id, lower, r.Resources.DiskMB)
		undo = append(undo, func() {
			if err := a.cfg.Layers.Destroy(cctx, id); err != nil {
				log.Warn("undo: destroy root filesystem", "error", err)
			}
		})
	}
	if err != nil {
		return fmt.Errorf("root filesystem: %w", err)
	}
	if !m.prepared {
		m.phases.done("layer")
	}
	if err := waitSlot(); err != nil {
		return err
	}
	if !m.prepared {
		m.phases.done("slot")
	}

	spec, err := a.sandboxSpec(r, root, slot)
	if err != nil {
		return err
	}
	// The start (or restore) and envd's readiness share one deadline, so a
	// runtime that hangs cannot hold the caller forever.
	rctx, cancel := context.WithTimeout(ctx, a.cfg.ReadyTimeout)
	defer cancel()
	switch {
	case m.prepared:
		prep, ok := a.drv.(driver.RestorePreparer)
		if !ok {
			return fmt.Errorf("driver %s cannot restore into a prepared sandbox: %w", a.drv.Name(), errdefs.ErrUnsupported)
		}
		if serr := a.spawn.do(func() { err = prep.RestorePrepared(rctx, id, m.restoreDir) }); serr != nil {
			err = serr
		}
	case m.restoreDir != "":
		ckpt, ok := a.checkpointer()
		if !ok {
			return fmt.Errorf("driver %s cannot restore a memory image: %w", a.drv.Name(), errdefs.ErrUnsupported)
		}
		if serr := a.spawn.do(func() { err = ckpt.Restore(rctx, spec, m.restoreDir) }); serr != nil {
			err = serr
		}
	default:
		if serr := a.spawn.do(func() { err = a.drv.Start(rctx, spec) }); serr != nil {
			err = serr
		}
	}
	// Undo the runtime container even when Start failed half-way.
	undo = append(undo, func() {
		if err := a.drv.Kill(cctx, id); err != nil && !errdefs.IsNotFound(err) {
			log.Debug("undo: kill runtime container", "error", err)
		}
		if err := a.drv.Delete(cctx, id); err != nil {
			log.Warn("undo: delete runtime container", "error", err)
		}
	})
	if err != nil {
		return fmt.Errorf("start in %s: %w", a.drv.Name(), err)
	}
	if m.restoreDir != "" {
		m.phases.done("restore")
	} else {
		m.phases.done("start")
	}

	addr := a.envdAddr(slot)
	if err := a.cfg.Envd.WaitHealthy(rctx, addr); err != nil {
		return fmt.Errorf("envd at %s did not become healthy: %w", addr, err)
	}
	m.phases.done("health")
	env := mergeEnv(r.Template.Env, r.EnvVars)
	init := EnvdInit{
		EnvVars:        env,
		AccessToken:    r.AccessToken,
		DefaultUser:    orDefault(r.Template.User, "user"),
		DefaultWorkdir: orDefault(r.Template.Workdir, "/home/user"),
		Timestamp:      a.clock.Now().UTC(),
		TasksLimit:     r.Resources.TasksPerUser(),
	}
	if err := a.cfg.Envd.Init(rctx, addr, r.InitToken, init); err != nil {
		return fmt.Errorf("envd init at %s: %w", addr, err)
	}
	if err := h.trustEgressCA(rctx, r.AccessToken, slot, r.Network); err != nil {
		return err
	}
	m.phases.done("init")
	if m.runStartCmd && r.Template.StartCmd != "" {
		p := EnvdProcess{
			Tag:  startCmdTag,
			Cmd:  "/bin/bash",
			Args: []string{"-l", "-c", r.Template.StartCmd},
			Envs: env,
			Cwd:  init.DefaultWorkdir,
			User: init.DefaultUser,
		}
		if err := a.cfg.Envd.Start(rctx, addr, r.AccessToken, p); err != nil {
			return fmt.Errorf("template start command: %w", err)
		}
		m.phases.done("start_cmd")
	}

	h.setHostObjects(slot, cgName, root, cg)
	return nil
}

// createCgroup makes sandbox cgroup name with res, replacing one an
// earlier incarnation whose teardown failed left behind.
func (a *Agent) createCgroup(ctx context.Context, name string, res sandbox.Resources) (cgroup.Cgroup, error) {
	cg, err := a.cfg.Cgroups.Create(ctx, name, res)
	if errdefs.IsAlreadyExists(err) {
		if old, oerr := a.cfg.Cgroups.Open(ctx, name); oerr == nil {
			_ = old.KillAll(ctx)
		}
		cg, err = a.cfg.Cgroups.Create(ctx, name, res)
	}
	return cg, err
}

// sandboxSpec is the driver's spec of sandbox r on root filesystem root
// in slot; it makes the bundle directory.
func (a *Agent) sandboxSpec(r record, root string, slot *netslot.Slot) (driver.Spec, error) {
	bundle := filepath.Join(sandboxDir(a.cfg.DataDir, r.ID), "bundle")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return driver.Spec{}, fmt.Errorf("bundle dir: %w", err)
	}
	sum := sha256.Sum256([]byte(r.InitToken))
	vols, err := a.volumeMounts(r)
	if err != nil {
		return driver.Spec{}, err
	}
	return driver.Spec{
		ID:            r.ID,
		BundleDir:     bundle,
		RootFS:        root,
		Hostname:      a.cfg.Hostname,
		Hosts:         "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + a.cfg.Hostname + "\n",
		ResolvConf:    a.cfg.ResolvConf,
		NetNSPath:     slot.NetNSPath,
		CgroupParent:  a.cfg.Cgroups.Path(sandbox.HostName(r.ID)),
		Resources:     r.Resources,
		GuestMemoryMB: r.GuestMemoryMB,
		Init: driver.Process{
			Args: []string{envdMountPath, "--port", strconv.Itoa(a.cfg.EnvdPort), "--init-token-sha256", hex.EncodeToString(sum[:])},
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cwd:  "/",
		},
		Mounts: append([]driver.Mount{{Source: a.cfg.EnvdPath, Destination: envdMountPath, ReadOnly: true, Type: "bind"}}, vols...),
	}, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// releaseRuntime stops h's runtime container and releases its cgroup and
// network slot. It goes on past errors and returns them joined. ph, when
// set, times its steps: kill, delete, cgroup and slot.
func (h *handle) releaseRuntime(ctx context.Context, log *slog.Logger, ph *phaseTimer) error {
	a := h.a
	st := h.get()
	id, slot, cg, cgName := h.id, st.rec.Slot, st.cg, st.rec.Cgroup
	var errs []error
	if err := a.drv.Kill(ctx, id); err != nil && !errdefs.IsNotFound(err) && !errdefs.IsConflict(err) {
		log.Debug("kill runtime container", "error", err)
	}
	ph.done("kill")
	if err := a.drv.Delete(ctx, id); err != nil {
		errs = append(errs, fmt.Errorf("runtime container: %w", err))
	}
	ph.done("delete")
	if cg == nil && cgName != "" {
		if c, err := a.cfg.Cgroups.Open(ctx, cgName); err == nil {
			cg = c
		}
	}
	if cg != nil {
		if err := cg.KillAll(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: %w", err))
		}
	}
	ph.done("cgroup")
	if slot != nil {
		if err := a.cfg.Net.Release(ctx, slot); err != nil {
			errs = append(errs, fmt.Errorf("network slot: %w", err))
		}
	}
	ph.done("slot")
	h.clearHostObjects()
	return errors.Join(errs...)
}

// destroy takes h out of the agent and deletes every host object it
// holds: runtime container, cgroup, network slot, root filesystem and
// layer, snapshot and state directory. Failures are logged (with log's
// attributes, kill_reason among them) and left to the leak reclaim. The
// caller holds h.op (or made h and has not let it out).
func (h *handle) destroy(ctx context.Context, log *slog.Logger) {
	a := h.a
	ctx = context.WithoutCancel(ctx)
	a.forget(h)
	if err := h.releaseRuntime(ctx, log, nil); err != nil {
		log.Warn("release sandbox host objects; the leak reclaim will retry", "error", err)
	}
	if err := a.cfg.Layers.Destroy(ctx, h.id); err != nil {
		log.Warn("destroy root filesystem; the leak reclaim will retry", "error", err)
	}
	if err := h.removeDir(); err != nil {
		log.Warn("remove state dir; the leak reclaim will retry", "error", err)
	}
	log.Debug("sandbox host objects released")
}
