// Package runsc is the gVisor runtime driver: it runs each sandbox as a
// gVisor sandbox by driving the runsc binary (systrap platform, no KVM
// needed), with pause (runsc pause/resume) and memory checkpoint/restore
// (pause with memory, fork).
//
// Host objects and files:
//
//	<StateDir>/runtime/      runsc --root: runsc's own container state
//	<StateDir>/sandboxes/    one versioned record per sandbox (oci.Record)
//	Spec.BundleDir           the OCI bundle (see package oci); removed by Delete
//	Spec.CgroupParent        the sandbox's cgroupsPath (runsc creates and removes it)
//
// Sandboxes run with --overlay2=none so that writes reach the root
// filesystem the node prepared (its size limit applies, and a
// filesystem-only pause keeps them), with --network=sandbox inside
// Spec.NetNSPath (the guest's netstack takes over the veth and its address)
// or --network=none when there is no namespace.
//
// Exit status and OOM: after start the driver runs `runsc wait <id>` (one
// small process per sandbox, killed with the agent) and reads the exit code
// from it. runsc hands the status to waiters only: a sandbox whose init
// exits with nobody waiting is gone without one, so after an agent restart
// an exit that happened while nobody watched reads as code -1. OOM is read
// from the sandbox's memory cgroup (v1 memory.oom_control, v2
// memory.events: oom_kill > 0) as soon as the wait returns, before runsc
// removes the cgroup.
//
// Restore needs an equivalent sandbox: the same mount destinations and
// files, the root filesystem with the same contents (any path), and a
// network namespace whenever the checkpointed sandbox had one. The ID,
// bundle, cgroup and namespace paths may differ. For a fork each child needs
// its own copy of the writable layer as it was at the checkpoint: Freeze the
// source, Checkpoint with LeaveRunning, copy the layer, Thaw (Checkpoint
// works on a frozen sandbox). A paused sandbox's Checkpoint without
// LeaveRunning leaves its layer as it was, so copying it later is fine.
//
// Exec: a cancelled Exec kills its process inside the sandbox (runsc kill
// --pid), as runsc forwards no signals to a non-terminal exec. Kill resumes
// a frozen sandbox first (runsc signals no paused sandbox).
//
// runsc's shared <root>/null-netns (the namespace of --network=none) is
// unmounted and removed after the last Delete, so an idle driver leaves
// nothing mounted.
package runsc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/oci"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Config configures the runsc driver.
type Config struct {
	// Path is the runsc binary (default "runsc" from $PATH). It must be a
	// static build (CGO_ENABLED=0); see RUNTIME-NOTES.md §3.6.
	Path string
	// StateDir holds runsc's state (--root) and the driver's records
	// (default /run/warren/runsc). Use one per node agent.
	StateDir string
	// Platform is runsc's --platform (default "systrap"; kvm hangs on the
	// nested development hosts).
	Platform string
	// CgroupRoot names the cgroup parent when Spec.CgroupParent is empty:
	// the sandbox's cgroupsPath is then <CgroupRoot>/sbx-<id> (default "/warren").
	CgroupRoot string
	// DefaultPids is the pids limit when Spec.Resources.Pids is 0 (default 4096).
	DefaultPids int64
	// ExtraFlags are added to every runsc invocation (e.g. --debug-log).
	ExtraFlags []string
	// Logger receives the driver's own logs (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Path == "" {
		c.Path = "runsc"
	}
	if c.StateDir == "" {
		c.StateDir = "/run/warren/runsc"
	}
	if c.Platform == "" {
		c.Platform = "systrap"
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = "/warren"
	}
	if c.DefaultPids == 0 {
		c.DefaultPids = 4096
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Driver drives runsc. Create it with New.
type Driver struct {
	cfg   Config
	root  string // runsc --root
	index oci.Index
	log   *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]*box

	// netMu guards the shared null network namespace that runsc
	// --network=none bind-mounts at <root>/null-netns: starts without a
	// network hold it shared, the clean-up after the last Delete exclusive.
	netMu sync.RWMutex
}

var (
	_ driver.Driver       = (*Driver)(nil)
	_ driver.Freezer      = (*Driver)(nil)
	_ driver.Checkpointer = (*Driver)(nil)
)

// box is what the driver holds in memory for one sandbox it started,
// restored or found.
type box struct {
	cgroupsPath string
	bundleDir   string
	watch       *oci.Watch
	waitCmd     *exec.Cmd
	killed      bool // Kill was called: the exit is a signal from us
	checkpoint  bool // a checkpoint without LeaveRunning is stopping it
	deleting    bool // Delete runs: an ended runsc wait is final
}

// New returns a runsc driver. It creates the state directories and checks
// that the binary runs.
func New(cfg Config) (*Driver, error) {
	cfg.setDefaults()
	path, err := exec.LookPath(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("runsc binary %q: %v: %w", cfg.Path, err, errdefs.ErrUnavailable)
	}
	cfg.Path = path
	d := &Driver{
		cfg:       cfg,
		root:      filepath.Join(cfg.StateDir, "runtime"),
		index:     oci.Index{Dir: filepath.Join(cfg.StateDir, "sandboxes")},
		log:       cfg.Logger.With("driver", "runsc"),
		sandboxes: map[string]*box{},
	}
	for _, dir := range []string{d.root, d.index.Dir} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return nil, fmt.Errorf("runsc state dir: %w", err)
		}
	}
	return d, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return "runsc" }

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Freeze: true, MemoryCheckpoint: true, StrongIsolation: true}
}

// RuntimeRoot is runsc's --root directory (for leak checks and tools).
func (d *Driver) RuntimeRoot() string { return d.root }

// cli returns the runsc client; network is "" for commands that do not
// create a sandbox.
func (d *Driver) cli(network string) oci.CLI {
	g := []string{"--root", d.root, "--platform", d.cfg.Platform, "--overlay2=none"}
	if network != "" {
		g = append(g, "--network="+network)
	}
	return oci.CLI{Path: d.cfg.Path, Global: append(g, d.cfg.ExtraFlags...)}
}

func (d *Driver) cgroupsPath(s driver.Spec) string {
	if s.CgroupParent != "" {
		return s.CgroupParent
	}
	return filepath.Join(d.cfg.CgroupRoot, sandbox.HostName(s.ID))
}

// Start implements driver.Driver: it writes the bundle and runs
// `runsc run -detach`; the sandbox's stdio goes to spec.Log.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) error {
	return d.create(ctx, spec, "")
}

// Restore implements driver.Checkpointer: `runsc restore -detach` of the
// image in dir as a new sandbox spec.ID (see the package doc for what must
// match the checkpointed sandbox).
func (d *Driver) Restore(ctx context.Context, spec driver.Spec, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint image in %s: %v: %w", spec.ID, dir, err, errdefs.ErrNotFound)
	}
	return d.create(ctx, spec, dir)
}

func (d *Driver) create(ctx context.Context, spec driver.Spec, imageDir string) (err error) {
	cg := d.cgroupsPath(spec)
	ociSpec, err := oci.Generate(spec, oci.Options{CgroupsPath: cg, DefaultPids: d.cfg.DefaultPids})
	if err != nil {
		return err
	}

	d.mu.Lock()
	if _, ok := d.sandboxes[spec.ID]; ok {
		d.mu.Unlock()
		return fmt.Errorf("sandbox %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	b := &box{cgroupsPath: cg, bundleDir: spec.BundleDir, watch: oci.NewWatch()}
	d.sandboxes[spec.ID] = b // reserves the ID
	d.mu.Unlock()
	if _, err := d.index.Get(spec.ID); err == nil {
		d.forget(spec.ID, b)
		return fmt.Errorf("sandbox %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}

	defer func() {
		if err != nil {
			d.cleanupFailed(spec.ID, b)
		}
	}()
	if err := oci.WriteBundle(spec, ociSpec); err != nil {
		return err
	}
	if err := d.index.Put(oci.Record{ID: spec.ID, BundleDir: spec.BundleDir, CgroupsPath: cg}); err != nil {
		return err
	}

	network := "sandbox"
	if spec.NetNSPath == "" {
		network = "none"
		d.netMu.RLock()
		defer d.netMu.RUnlock()
	}
	logf, release, err := oci.OpenLog(spec.BundleDir, spec.Log)
	if err != nil {
		return fmt.Errorf("sandbox %q: log: %w", spec.ID, err)
	}
	args := []string{"run", "-detach", "--bundle", spec.BundleDir, spec.ID}
	op := "start"
	if imageDir != "" {
		args = []string{"restore", "-detach", "--image-path", imageDir, "--bundle", spec.BundleDir, spec.ID}
		op = "restore"
	}
	cmd := d.cli(network).Command(ctx, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	runErr := cmd.Run()
	release()
	if runErr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("sandbox %q: %s: %w", spec.ID, op, ctx.Err())
		}
		return fmt.Errorf("sandbox %q: %s: %v: %s", spec.ID, op, runErr, oci.LogTail(spec.BundleDir, spec.Log))
	}
	if err := d.watchExit(spec.ID, b); err != nil {
		return err
	}
	d.log.Debug("sandbox started", "sandbox_id", spec.ID, "op", op, "network", network)
	return nil
}

// cleanupFailed removes what a failed create left behind.
func (d *Driver) cleanupFailed(id string, b *box) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.cli("").Run(ctx, "delete", "-force", id); err != nil && !oci.NotExist(err) {
		d.log.Warn("delete after failed start", "sandbox_id", id, "err", err)
	}
	b.watch.Finish(driver.Exit{Code: -1}, fmt.Errorf("sandbox %q: start failed: %w", id, errdefs.ErrNotFound))
	d.mu.Lock()
	b.deleting = true
	cmd := b.waitCmd
	d.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
	}
	_ = d.index.Remove(id)
	_ = os.RemoveAll(b.bundleDir)
	d.forget(id, b)
	d.cleanNullNetns(ctx)
}

func (d *Driver) forget(id string, b *box) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sandboxes[id] == b {
		delete(d.sandboxes, id)
	}
}

// watchExit starts `runsc wait id` and finishes b.watch when it returns.
func (d *Driver) watchExit(id string, b *box) error {
	cmd := d.cli("").Command(context.Background(), "wait", id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sandbox %q: runsc wait: %w", id, err)
	}
	d.mu.Lock()
	b.waitCmd = cmd
	d.mu.Unlock()
	go func() {
		werr := cmd.Wait()
		if d.waitLost(id, b, cmd) {
			// Our runsc wait was killed while the sandbox runs on (its
			// parent-death signal fires when the OS thread that started
			// it exits): watch again.
			if err := d.watchExit(id, b); err == nil {
				return
			}
		}
		e := driver.Exit{Code: -1}
		var ws struct {
			ExitStatus int `json:"exitStatus"`
		}
		if werr == nil && json.Unmarshal([]byte(stdout.String()), &ws) == nil {
			e = oci.ExitFromCode(ws.ExitStatus)
		} else {
			d.log.Debug("sandbox exit status unavailable", "sandbox_id", id, "err", werr,
				"stderr", strings.TrimSpace(stderr.String()))
		}
		d.finishExit(id, b, e)
	}()
	return nil
}

// waitLost reports whether the runsc wait cmd died by a signal while the
// sandbox is still alive and not being deleted.
func (d *Driver) waitLost(id string, b *box, cmd *exec.Cmd) bool {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return false
	}
	d.mu.Lock()
	deleting := b.deleting
	d.mu.Unlock()
	if deleting {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := d.cli("").State(ctx, id)
	return err == nil && oci.DriverState(st.Status) != driver.StateStopped && oci.ProcessAlive(st.Pid)
}

// finishExit completes e with what the driver knows (OOM, our own kill,
// checkpoint) and records it.
func (d *Driver) finishExit(id string, b *box, e driver.Exit) {
	if n, err := oci.OOMKills(b.cgroupsPath); err == nil && n > 0 {
		e.OOM = true
		e.Signaled = true
		if e.Code < 0 {
			e.Code = 128 + int(unix.SIGKILL)
		}
	}
	d.mu.Lock()
	killed, ckpt := b.killed, b.checkpoint
	d.mu.Unlock()
	switch {
	case ckpt:
		e = driver.Exit{Code: 0}
	case killed && !e.OOM && e.Code < 0:
		e = driver.Exit{Code: 128 + int(unix.SIGKILL), Signaled: true}
	}
	b.watch.Finish(e, nil)
}

// lookup returns the in-memory box of id, recovering one from the index for
// a sandbox started by an earlier run of the agent.
func (d *Driver) lookup(ctx context.Context, id string) (*box, error) {
	d.mu.Lock()
	b, ok := d.sandboxes[id]
	d.mu.Unlock()
	if ok {
		return b, nil
	}
	rec, err := d.index.Get(id)
	if err != nil {
		return nil, err
	}
	b = &box{cgroupsPath: rec.CgroupsPath, bundleDir: rec.BundleDir, watch: oci.NewWatch()}
	if rec.Stopped {
		b.watch.Finish(rec.Exit, nil)
	} else if st, err := d.cli("").State(ctx, id); err != nil || oci.DriverState(st.Status) == driver.StateStopped || !oci.ProcessAlive(st.Pid) {
		b.watch.Finish(driver.Exit{Code: -1}, nil)
	}
	d.mu.Lock()
	if cur, ok := d.sandboxes[id]; ok {
		d.mu.Unlock()
		return cur, nil
	}
	d.sandboxes[id] = b
	d.mu.Unlock()
	if !b.watch.Finished() {
		if err := d.watchExit(id, b); err != nil {
			b.watch.Finish(driver.Exit{Code: -1}, nil)
		}
	}
	return b, nil
}

// Wait implements driver.Driver.
func (d *Driver) Wait(ctx context.Context, id string) (driver.Exit, error) {
	b, err := d.lookup(ctx, id)
	if err != nil {
		return driver.Exit{}, err
	}
	e, err := b.watch.Wait(ctx)
	if err != nil {
		return driver.Exit{}, fmt.Errorf("sandbox %q: wait: %w", id, err)
	}
	return e, nil
}

// Exec implements driver.Driver with `runsc exec --process`.
func (d *Driver) Exec(ctx context.Context, id string, p driver.Process) (int, error) {
	b, err := d.lookup(ctx, id)
	if err != nil {
		return -1, err
	}
	if b.watch.Finished() {
		return -1, fmt.Errorf("sandbox %q is stopped: %w", id, errdefs.ErrConflict)
	}
	code, err := d.cli("").Exec(ctx, id, b.bundleDir, p, oci.ExecOptions{
		KillInside: func(ctx context.Context, pid int) error {
			_, err := d.cli("").Run(ctx, "kill", "--pid", strconv.Itoa(pid), id, "KILL")
			return err
		},
	})
	if err != nil || code == 0 {
		return code, err
	}
	// runsc fails with code 128 when it cannot exec (paused, stopped): tell
	// that apart from the process's own exit code by the sandbox's state.
	// A sandbox that died under the exec still reads as running for a
	// moment, so give its watch a chance to see the exit.
	if code == 128 {
		select {
		case <-b.watch.Done():
			return -1, fmt.Errorf("sandbox %q stopped during exec: %w", id, errdefs.ErrConflict)
		case <-time.After(2 * time.Second):
		}
	}
	if st, serr := d.Status(ctx, id); serr != nil {
		return -1, serr
	} else if st.State != driver.StateRunning {
		return -1, fmt.Errorf("sandbox %q is %s: %w", id, st.State, errdefs.ErrConflict)
	}
	return code, nil
}

// Kill implements driver.Driver: SIGKILL to the sandbox's init, which ends
// the whole gVisor sandbox.
func (d *Driver) Kill(ctx context.Context, id string) error {
	b, err := d.lookup(ctx, id)
	if err != nil {
		return err
	}
	if b.watch.Finished() {
		return nil
	}
	d.mu.Lock()
	b.killed = true
	d.mu.Unlock()
	st, err := d.cli("").State(ctx, id)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil
		}
		return err
	}
	if oci.DriverState(st.Status) == driver.StateFrozen {
		// runsc refuses to signal a paused sandbox: resume it first (it
		// runs for the moment until the signal lands).
		if _, err := d.cli("").Run(ctx, "resume", id); err != nil {
			return fmt.Errorf("sandbox %q: resume to kill: %w", id, err)
		}
	}
	if _, err := d.cli("").Run(ctx, "kill", id, "KILL"); err != nil {
		if cur, serr := d.Status(ctx, id); serr == nil && cur.State == driver.StateStopped {
			return nil
		}
		return fmt.Errorf("sandbox %q: kill: %w", id, err)
	}
	return nil
}

// Delete implements driver.Driver: `runsc delete -force`, then the bundle,
// the record and, after the last sandbox, runsc's null network namespace.
func (d *Driver) Delete(ctx context.Context, id string) error {
	if !sandbox.ValidID(id) {
		return nil
	}
	d.mu.Lock()
	b, ok := d.sandboxes[id]
	d.mu.Unlock()
	bundleDir := ""
	if ok {
		bundleDir = b.bundleDir
	} else if rec, err := d.index.Get(id); err == nil {
		bundleDir = rec.BundleDir
	} else if st, err := d.cli("").State(ctx, id); err == nil {
		bundleDir = st.Bundle
	}
	if _, err := d.cli("").Run(ctx, "delete", "-force", id); err != nil && !oci.NotExist(err) {
		return fmt.Errorf("sandbox %q: delete: %w", id, err)
	}
	if ok {
		d.mu.Lock()
		b.killed = true
		b.deleting = true
		cmd := b.waitCmd
		d.mu.Unlock()
		// The sandbox is gone, so runsc wait returns; bound it anyway.
		select {
		case <-b.watch.Done():
		case <-time.After(10 * time.Second):
			if cmd != nil {
				_ = cmd.Process.Kill()
			}
			<-b.watch.Done()
		}
		d.forget(id, b)
	}
	if bundleDir != "" {
		if err := os.RemoveAll(bundleDir); err != nil {
			return fmt.Errorf("sandbox %q: remove bundle: %w", id, err)
		}
	}
	if err := d.index.Remove(id); err != nil {
		return err
	}
	d.cleanNullNetns(ctx)
	return nil
}

// cleanNullNetns unmounts runsc's shared null network namespace once no
// sandbox is left, so that an idle driver leaves nothing mounted.
func (d *Driver) cleanNullNetns(ctx context.Context) {
	path := filepath.Join(d.root, "null-netns")
	if _, err := os.Lstat(path); err != nil {
		return
	}
	d.mu.Lock()
	busy := len(d.sandboxes) > 0
	d.mu.Unlock()
	if busy {
		return // not the last one this driver knows; skip the runsc list
	}
	d.netMu.Lock()
	defer d.netMu.Unlock()
	ids, err := d.cli("").List(ctx)
	if err != nil || len(ids) > 0 {
		return
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		d.log.Warn("unmount null netns", "path", path, "err", err)
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("remove null netns", "path", path, "err", err)
	}
}

// Status implements driver.Driver.
func (d *Driver) Status(ctx context.Context, id string) (driver.Status, error) {
	d.mu.Lock()
	b, ok := d.sandboxes[id]
	d.mu.Unlock()
	if ok && b.watch.Finished() {
		return driver.Status{ID: id, State: driver.StateStopped}, nil
	}
	st, err := d.cli("").State(ctx, id)
	if errdefs.IsNotFound(err) {
		if ok {
			return driver.Status{ID: id, State: driver.StateStopped}, nil
		}
		if rec, ierr := d.index.Get(id); ierr == nil {
			_ = rec
			return driver.Status{ID: id, State: driver.StateStopped}, nil
		}
	}
	if err != nil {
		return driver.Status{}, err
	}
	state := oci.DriverState(st.Status)
	pid := st.Pid
	if state != driver.StateStopped && !oci.ProcessAlive(pid) {
		state = driver.StateStopped // a zombie sandbox process reads as running
	}
	if state == driver.StateStopped || pid < 0 {
		pid = 0
	}
	return driver.Status{ID: id, State: state, InitPID: pid}, nil
}

// List implements driver.Driver: every container runsc knows under the
// driver's root, and every sandbox with a record.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	ids, err := d.cli("").List(ctx)
	if err != nil {
		return nil, fmt.Errorf("runsc list: %w", err)
	}
	recs, err := d.index.IDs()
	if err != nil {
		return nil, err
	}
	return oci.MergeIDs(ids, recs), nil
}

// Freeze implements driver.Freezer with `runsc pause`.
func (d *Driver) Freeze(ctx context.Context, id string) error {
	return d.setFrozen(ctx, id, "pause", driver.StateFrozen)
}

// Thaw implements driver.Freezer with `runsc resume`.
func (d *Driver) Thaw(ctx context.Context, id string) error {
	return d.setFrozen(ctx, id, "resume", driver.StateRunning)
}

func (d *Driver) setFrozen(ctx context.Context, id, verb string, want driver.State) error {
	if _, err := d.lookup(ctx, id); err != nil {
		return err
	}
	_, err := d.cli("").Run(ctx, verb, id)
	if err == nil {
		return nil
	}
	st, serr := d.Status(ctx, id)
	if serr != nil {
		return serr
	}
	if st.State == want {
		return nil
	}
	return fmt.Errorf("sandbox %q is %s: %s: %v: %w", id, st.State, verb, err, errdefs.ErrConflict)
}

// Checkpoint implements driver.Checkpointer with `runsc checkpoint`. Without
// LeaveRunning the stopped container is deleted from runsc at once (runsc
// cannot restore under an ID it still holds), and the driver remembers the
// sandbox as stopped until Delete.
func (d *Driver) Checkpoint(ctx context.Context, id string, dir string, opts driver.CheckpointOptions) error {
	b, err := d.lookup(ctx, id)
	if err != nil {
		return err
	}
	if st, err := d.Status(ctx, id); err != nil {
		return err
	} else if st.State != driver.StateRunning && st.State != driver.StateFrozen {
		return fmt.Errorf("sandbox %q is %s: %w", id, st.State, errdefs.ErrConflict)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint dir: %w", id, err)
	}
	args := []string{"checkpoint", "--image-path", dir}
	if opts.LeaveRunning {
		args = append(args, "--leave-running")
	} else {
		d.mu.Lock()
		b.checkpoint = true
		d.mu.Unlock()
	}
	if _, err := d.cli("").Run(ctx, append(args, id)...); err != nil {
		d.mu.Lock()
		b.checkpoint = false
		d.mu.Unlock()
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	if opts.LeaveRunning {
		return nil
	}
	if err := d.index.Put(oci.Record{ID: id, BundleDir: b.bundleDir, CgroupsPath: b.cgroupsPath, Stopped: true}); err != nil {
		return err
	}
	if _, err := d.cli("").Run(ctx, "delete", "-force", id); err != nil && !oci.NotExist(err) {
		return fmt.Errorf("sandbox %q: delete after checkpoint: %w", id, err)
	}
	select {
	case <-b.watch.Done():
	case <-ctx.Done():
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, ctx.Err())
	}
	return nil
}
