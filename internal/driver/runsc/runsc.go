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
// Limits (limits.go): the guest enforces its own task limit (envd's, from
// which envd is exempt through CAP_SYS_RESOURCE, given to init alone) and
// sees Resources.MemoryMB; the host cgroup is a wall above both, set after
// the sandbox boots, and the stubs of guest processes are the host OOM
// killer's first choice. runsc runs with --allow-suid so that sudo works
// inside; host bind mounts stay nosuid.
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
// A restore can go into a sandbox made ahead (driver.RestorePreparer,
// prepare.go): `runsc create` starts its gofer and sentry, which wait, and
// `runsc restore` later loads the image into that container instead of
// booting one (about 100 ms less of a restore on the development host).
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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/oci"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Config configures the runsc driver.
type Config struct {
	// Path is the runsc binary (default "runsc" from $PATH). It must be a
	// static build (CGO_ENABLED=0, as make build makes it): runsc re-executes
	// itself inside its sandbox, where the host's shared libraries are not.
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
	cfg Config
	rt  *oci.Runtime
	cli oci.CLI // for commands that do not create a sandbox
	log *slog.Logger

	// netMu guards the shared null network namespace that runsc
	// --network=none bind-mounts at <root>/null-netns: starts without a
	// network hold it shared, the clean-up after the last Delete exclusive.
	netMu sync.RWMutex

	// prepMu guards prepared: the sandboxes made by PrepareRestore and
	// not yet restored (prepare.go).
	prepMu   sync.Mutex
	prepared map[string]*start

	// lowerOOM: the driver may lower the sentry's and gofer's
	// oom_score_adj; otherwise each sandbox with a memory limit gets an
	// OOM reserve (oomreserve_linux.go).
	lowerOOM bool
}

var (
	_ driver.Driver       = (*Driver)(nil)
	_ driver.Freezer      = (*Driver)(nil)
	_ driver.Checkpointer = (*Driver)(nil)
	_ driver.Resizer      = (*Driver)(nil)

	_ driver.RestorePreparer = (*Driver)(nil)
)

// New returns a runsc driver. It creates the state directories and checks
// that the binary exists. Off Linux it fails with errdefs.ErrUnavailable.
func New(cfg Config) (*Driver, error) {
	cfg.setDefaults()
	d := &Driver{log: cfg.Logger.With("driver", "runsc"), prepared: map[string]*start{}}
	rt, err := oci.NewRuntime(oci.RuntimeConfig{
		Name:        "runsc",
		Path:        cfg.Path,
		StateDir:    cfg.StateDir,
		Flags:       append(globalFlags(cfg.Platform), cfg.ExtraFlags...),
		CgroupRoot:  cfg.CgroupRoot,
		DefaultPids: cfg.DefaultPids,
		CheckAlive:  true,
		Adopt:       d.adopt,
		Watch: func(id string, b *oci.Box) {
			if err := d.watchExit(id, b); err != nil {
				b.Watch.Finish(driver.Exit{Code: -1}, nil)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	d.rt, d.cli = rt, rt.CLI()
	cfg.Path = d.cli.Path
	d.cfg = cfg
	d.lowerOOM = canLowerOOMScore()
	d.log.Debug("sentry protection at the memory wall", "lower_oom_score_adj", d.lowerOOM, "oom_reserve_mb", d.reserveMB(1))
	for _, f := range orphanReserves(cfg.CgroupRoot) {
		if err := os.Remove(f); err == nil {
			d.log.Info("removed the oom reserve of a sandbox that is gone", "path", f)
		}
	}
	return d, nil
}

// reserveMB is the OOM reserve of a sandbox with guestMB of guest memory
// (ReserveMB).
func (d *Driver) reserveMB(guestMB int64) int64 {
	if d.lowerOOM {
		return 0
	}
	return ReserveMB(guestMB)
}

// ReserveMB is the OOM reserve the driver gives a sandbox with guestMB of
// guest memory on this host: OOMReserveMB where the sentry's oom_score_adj
// cannot be lowered and the sandbox has a memory limit, else 0.
func ReserveMB(guestMB int64) int64 {
	if guestMB <= 0 || canLowerOOMScore() {
		return 0
	}
	return OOMReserveMB
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return "runsc" }

// Identity names the runsc build and platform a checkpoint of this driver
// is tied to: the sha256 of the runsc binary and --platform (what a node
// restoring another's template snapshot must match).
func (d *Driver) Identity() (string, error) {
	p, err := exec.LookPath(d.cfg.Path)
	if err != nil {
		return "", fmt.Errorf("runsc identity: %w", err)
	}
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("runsc identity: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("runsc identity: %w", err)
	}
	return "runsc sha256:" + hex.EncodeToString(h.Sum(nil)) + " platform " + d.cfg.Platform, nil
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Freeze: true, MemoryCheckpoint: true, StrongIsolation: true}
}

// RuntimeRoot is runsc's --root directory (for leak checks and tools).
func (d *Driver) RuntimeRoot() string { return d.rt.Root() }

// createCLI returns the runsc client for run and restore, with the
// sandbox's --network.
func (d *Driver) createCLI(network string) oci.CLI {
	g := append([]string{"--root", d.rt.Root()}, globalFlags(d.cfg.Platform)...)
	g = append(g, "--network="+network)
	return oci.CLI{Path: d.cli.Path, Global: append(g, d.cfg.ExtraFlags...)}
}

// globalFlags are the runsc flags of every invocation: the platform, no
// overlay, --allow-suid so that setuid binaries (sudo) work inside
// (gVisor is the boundary, and host paths are bound nosuid anyway), and
// --file-access-mounts=shared (runsc's default, stated): a bind mount is
// read and written through to the host with its metadata revalidated at
// every use, never cached in the sentry, so that what another sandbox or
// the host wrote to a shared volume is what a read sees once that write
// returned (docs/volumes.md has the measurements; exclusive serves stale
// files and directories).
func globalFlags(platform string) []string {
	return []string{"--platform", platform, "--overlay2=none", "--allow-suid", "--file-access-mounts=shared"}
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

func (d *Driver) create(ctx context.Context, spec driver.Spec, imageDir string) error {
	return d.made(spec, func(p *start) error {
		op, args := "start", []string{"run", "-detach", "--bundle", spec.BundleDir, spec.ID}
		if imageDir != "" {
			op, args = "restore", []string{"restore", "-detach", "--image-path", imageDir, "--bundle", spec.BundleDir, spec.ID}
		}
		if err := d.runCreate(ctx, p, op, args...); err != nil {
			return err
		}
		return d.started(p, op)
	})
}

// made writes spec's bundle and runs fn on it (under the network lock,
// underNetwork); when fn fails, what it made is cleaned up.
func (d *Driver) made(spec driver.Spec, fn func(*start) error) error {
	p, err := d.newStart(spec)
	if err != nil {
		return err
	}
	if err := d.underNetwork(p, func() error { return fn(p) }); err != nil {
		d.cleanupFailed(spec.ID, p.b) // takes netMu itself: after its read lock is gone
		return err
	}
	return nil
}

// underNetwork runs fn holding the read lock of runsc's shared null
// network namespace for a sandbox without a network of its own, so that
// cleanNullNetns does not remove it meanwhile.
func (d *Driver) underNetwork(p *start, fn func() error) error {
	if p.network == "none" {
		d.netMu.RLock()
		defer d.netMu.RUnlock()
	}
	return fn()
}

// start is a sandbox being made: its box, spec, --network and host pids
// wall, from newStart to started (or, prepared, until RestorePrepared).
type start struct {
	spec     driver.Spec
	b        *oci.Box
	network  string
	hostPids int64
}

// newStart writes spec's bundle and record and sets the cgroup's pids
// wall; after it the caller cleans up with cleanupFailed.
func (d *Driver) newStart(spec driver.Spec) (*start, error) {
	guestTasks := spec.Resources.TasksPerUser()
	if guestTasks == 0 {
		guestTasks = d.cfg.DefaultPids
	}
	p := &start{spec: spec, network: "sandbox", hostPids: HostPids(guestTasks)}
	if spec.NetNSPath == "" {
		p.network = "none"
	}
	b, err := d.rt.Prepare(spec, oci.Options{InitCaps: []string{"CAP_SYS_RESOURCE"}, HostPids: p.hostPids})
	if err != nil {
		return nil, err
	}
	p.b = b
	if err := setPidsWall(b.CgroupsPath, p.hostPids); err != nil {
		d.cleanupFailed(spec.ID, b)
		return nil, fmt.Errorf("sandbox %q: %w", spec.ID, err)
	}
	return p, nil
}

// runCreate runs the runsc command args (run, create or restore) of p's
// sandbox, its output to the sandbox's log.
func (d *Driver) runCreate(ctx context.Context, p *start, op string, args ...string) error {
	id := p.spec.ID
	logf, release, err := oci.OpenLog(p.spec.BundleDir, p.spec.Log)
	if err != nil {
		return fmt.Errorf("sandbox %q: log: %w", id, err)
	}
	cmd := d.createCLI(p.network).Command(ctx, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	runErr := cmd.Run()
	release()
	if runErr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("sandbox %q: %s: %w", id, op, ctx.Err())
		}
		return fmt.Errorf("sandbox %q: %s: %v: %s", id, op, runErr, oci.LogTail(p.spec.BundleDir, p.spec.Log))
	}
	return nil
}

// started finishes the start (or restore) of p's sandbox, now running:
// its exit is watched, the host wall set and the stubs marked.
func (d *Driver) started(p *start, op string) error {
	id := p.spec.ID
	if err := d.watchExit(id, p.b); err != nil {
		return err
	}
	// The guest read its memory size from the cgroup at boot; now the
	// host wall moves above it (see limits.go).
	cg, guestMB := p.b.CgroupsPath, p.spec.Resources.MemoryMB
	reserve := d.reserveMB(guestMB)
	if err := setHostWall(cg, guestMB, p.hostPids, reserve); err != nil {
		return fmt.Errorf("sandbox %q: %w", id, err)
	}
	pool, marked, err := markStubs(cg, initExecutable(p.spec))
	if err != nil {
		return fmt.Errorf("sandbox %q: %w", id, err)
	}
	if d.lowerOOM {
		if err := protectRuntime(cg); err != nil {
			return fmt.Errorf("sandbox %q: %w", id, err)
		}
	} else if reserve > 0 {
		// The reserve protects the sandbox from itself only: a sandbox
		// without one runs, as it did before there were reserves.
		if err := makeReserve(cg, reserve); err != nil {
			d.log.Warn("sandbox runs without its oom reserve", "sandbox_id", id, "err", err)
		}
	}
	d.log.Debug("sandbox started", "sandbox_id", id, "op", op, "network", p.network, "stub_pool_pid", pool, "stubs_marked", marked)
	return nil
}

// initExecutable is the host file of the init's executable: the mount
// bound at its path (envd's), or that path in the root filesystem.
func initExecutable(spec driver.Spec) string {
	exe := spec.Init.Args[0]
	for _, m := range spec.Mounts {
		if m.Type != "tmpfs" && filepath.Clean(m.Destination) == filepath.Clean(exe) {
			return m.Source
		}
	}
	return filepath.Join(spec.RootFS, exe)
}

// cleanupFailed removes what a failed create left behind.
func (d *Driver) cleanupFailed(id string, b *oci.Box) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := removeReserve(b.CgroupsPath); err != nil {
		d.log.Warn("after failed start", "sandbox_id", id, "err", err)
	}
	if _, err := d.cli.Run(ctx, "delete", "-force", id); err != nil && !d.cli.Absent(ctx, id, err) {
		d.log.Warn("delete after failed start", "sandbox_id", id, "err", err)
	}
	b.Watch.Finish(driver.Exit{Code: -1}, fmt.Errorf("sandbox %q: start failed: %w", id, errdefs.ErrNotFound))
	if cmd := b.MarkDeleting(); cmd != nil {
		_ = cmd.Process.Kill()
	}
	d.rt.Discard(id, b)
	d.cleanNullNetns(ctx)
}

// watchExit starts `runsc wait id` and finishes b.Watch when it returns.
func (d *Driver) watchExit(id string, b *oci.Box) error {
	cmd := d.cli.Command(context.Background(), "wait", id)
	cmd.SysProcAttr = waitProcAttr()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sandbox %q: runsc wait: %w", id, err)
	}
	b.SetWatcher(cmd)
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
		d.rt.FinishExit(b, e)
	}()
	return nil
}

// waitLost reports whether the runsc wait cmd died by a signal while the
// sandbox is still alive and not being deleted.
func (d *Driver) waitLost(id string, b *oci.Box, cmd *exec.Cmd) bool {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return false
	}
	if b.Deleting() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := d.cli.State(ctx, id)
	return err == nil && oci.DriverState(st.Status) != driver.StateStopped && oci.ProcessAlive(st.Pid)
}

// adopt finishes the watch of a sandbox found in the index (started by an
// earlier run of the agent) that runsc no longer runs; Lookup then starts
// watchExit for one that it does.
func (d *Driver) adopt(ctx context.Context, id string, b *oci.Box) {
	if st, err := d.cli.State(ctx, id); err != nil || oci.DriverState(st.Status) == driver.StateStopped || !oci.ProcessAlive(st.Pid) {
		b.Watch.Finish(driver.Exit{Code: -1}, nil)
	}
}

// Wait implements driver.Driver.
func (d *Driver) Wait(ctx context.Context, id string) (driver.Exit, error) {
	return d.rt.Wait(ctx, id)
}

// Exec implements driver.Driver with `runsc exec --process`. A cancelled
// exec is ended with `runsc kill --pid` inside the sandbox; runsc fails
// with code 128 when it cannot exec.
func (d *Driver) Exec(ctx context.Context, id string, p driver.Process) (int, error) {
	return d.rt.Exec(ctx, id, p, oci.ExecOptions{
		KillInside: func(ctx context.Context, pid int) error {
			_, err := d.cli.Run(ctx, "kill", "--pid", strconv.Itoa(pid), id, "KILL")
			return err
		},
		CannotExecCode: 128,
	})
}

// Kill implements driver.Driver: SIGKILL to the sandbox's init, which ends
// the whole gVisor sandbox.
func (d *Driver) Kill(ctx context.Context, id string) error {
	if d.isPrepared(id) {
		return nil // nothing runs in it; Delete removes it
	}
	st, ok, err := d.rt.BeginKill(ctx, id)
	if !ok || err != nil {
		return err
	}
	if oci.DriverState(st.Status) == driver.StateFrozen {
		// runsc refuses to signal a paused sandbox: resume it first (it
		// runs for the moment until the signal lands).
		if _, err := d.cli.Run(ctx, "resume", id); err != nil {
			return fmt.Errorf("sandbox %q: resume to kill: %w", id, err)
		}
	}
	if _, err := d.cli.Run(ctx, "kill", id, "KILL"); err != nil {
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
	if err := d.rt.Delete(ctx, id, d.deleteContainer); err != nil {
		return err
	}
	d.cleanNullNetns(ctx)
	return nil
}

// deleteContainer is Delete's runsc part: runsc forgets the sandbox, and
// the exit of b (nil when the driver holds no box) is awaited.
func (d *Driver) deleteContainer(ctx context.Context, id string, b *oci.Box) error {
	if _, err := d.cli.Run(ctx, "delete", "-force", id); err != nil && !d.cli.Absent(ctx, id, err) {
		return fmt.Errorf("sandbox %q: delete: %w", id, err)
	}
	if b == nil {
		return nil
	}
	if err := removeReserve(b.CgroupsPath); err != nil {
		return fmt.Errorf("sandbox %q: %w", id, err)
	}
	if d.takePrepared(id) != nil {
		// Never started: no runsc wait watches it.
		b.Watch.Finish(driver.Exit{Code: -1}, nil)
		return nil
	}
	cmd := b.MarkDeleting()
	// The sandbox is gone, so runsc wait returns; bound it anyway.
	select {
	case <-b.Watch.Done():
	case <-time.After(10 * time.Second):
		if cmd != nil {
			_ = cmd.Process.Kill()
		}
		<-b.Watch.Done()
	}
	return nil
}

// cleanNullNetns unmounts runsc's shared null network namespace once no
// sandbox is left, so that an idle driver leaves nothing mounted.
func (d *Driver) cleanNullNetns(ctx context.Context) {
	path := filepath.Join(d.rt.Root(), "null-netns")
	if _, err := os.Lstat(path); err != nil {
		return
	}
	if d.rt.Len() > 0 {
		return // not the last one this driver knows; skip the runsc list
	}
	d.netMu.Lock()
	defer d.netMu.Unlock()
	ids, err := d.cli.List(ctx)
	if err != nil || len(ids) > 0 {
		return
	}
	if err := unmountDetach(path); err != nil {
		d.log.Warn("unmount null netns", "path", path, "err", err)
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("remove null netns", "path", path, "err", err)
	}
}

// Status implements driver.Driver. A sandbox whose runsc sandbox process
// is a zombie or gone reads as stopped.
func (d *Driver) Status(ctx context.Context, id string) (driver.Status, error) {
	return d.rt.Status(ctx, id)
}

// List implements driver.Driver: every container runsc knows under the
// driver's root, and every sandbox with a record.
func (d *Driver) List(ctx context.Context) ([]string, error) { return d.rt.List(ctx) }

// Resize implements driver.Resizer: the host wall (pids and memory, see
// limits.go) moves above the limits res gives the guest, as after a start
// with res. The guest keeps what it read at boot: its memory size
// (runsc's --total-memory, from the cgroup at start) and CPU count.
func (d *Driver) Resize(ctx context.Context, id string, res sandbox.Resources) error {
	b, err := d.rt.Lookup(ctx, id)
	if err != nil {
		return err
	}
	guestTasks := res.TasksPerUser()
	if guestTasks == 0 {
		guestTasks = d.cfg.DefaultPids
	}
	var reserve int64
	if hasReserve(b.CgroupsPath) {
		reserve = OOMReserveMB
	}
	if err := setHostWall(b.CgroupsPath, res.MemoryMB, HostPids(guestTasks), reserve); err != nil {
		return fmt.Errorf("sandbox %q: resize: %w", id, err)
	}
	return nil
}

// Freeze implements driver.Freezer with `runsc pause`.
func (d *Driver) Freeze(ctx context.Context, id string) error { return d.rt.Freeze(ctx, id) }

// Thaw implements driver.Freezer with `runsc resume`.
func (d *Driver) Thaw(ctx context.Context, id string) error { return d.rt.Thaw(ctx, id) }

// Checkpoint implements driver.Checkpointer with `runsc checkpoint`. Without
// LeaveRunning the stopped container is deleted from runsc at once (runsc
// cannot restore under an ID it still holds), and the driver remembers the
// sandbox as stopped until Delete.
func (d *Driver) Checkpoint(ctx context.Context, id string, dir string, opts driver.CheckpointOptions) error {
	b, err := d.rt.Lookup(ctx, id)
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
		b.SetCheckpointing(true)
	}
	if _, err := d.cli.Run(ctx, append(args, id)...); err != nil {
		b.SetCheckpointing(false)
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	if opts.LeaveRunning {
		return nil
	}
	if err := removeReserve(b.CgroupsPath); err != nil { // a resume makes a new one
		return fmt.Errorf("sandbox %q: %w", id, err)
	}
	if err := d.rt.Index().Put(oci.Record{ID: id, BundleDir: b.BundleDir, CgroupsPath: b.CgroupsPath, Stopped: true}); err != nil {
		return err
	}
	if _, err := d.cli.Run(ctx, "delete", "-force", id); err != nil && !d.cli.Absent(ctx, id, err) {
		return fmt.Errorf("sandbox %q: delete after checkpoint: %w", id, err)
	}
	select {
	case <-b.Watch.Done():
	case <-ctx.Done():
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, ctx.Err())
	}
	return nil
}
