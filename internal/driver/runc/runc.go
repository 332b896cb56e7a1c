// Package runc is the plain-container runtime driver: it runs each sandbox
// as a runc container (Debian's runc 1.1.5 by default). It starts faster
// than runsc but has no kernel of its own between the sandbox and the host,
// so it is for trusted workloads and the speed baseline. Pause is by
// freezing only (runc pause/resume); there is no memory checkpoint (CRIU
// does not work on the development hosts), so it implements driver.Freezer
// and not driver.Checkpointer.
//
// Host objects and files:
//
//	<StateDir>/runtime/      runc --root: runc's own container state
//	<StateDir>/sandboxes/    one versioned record per sandbox (oci.Record)
//	Spec.BundleDir           the OCI bundle (package oci) and init.pid; removed by Delete
//	Spec.CgroupParent        the container's cgroupsPath, always explicit (without one
//	                         runc nests the container in the caller's cgroup)
//
// Network: runc joins Spec.NetNSPath, which the node prepares with lo up
// (runc does not bring lo up). Without one the container gets a new, empty
// network namespace.
//
// Exit status: the driver runs `runc run --keep` in the foreground as its
// child, so the exit code of init is runc's own; --keep leaves the stopped
// container (and its cgroup) until Delete, so OOM is read from the memory
// cgroup (v1 memory.oom_control, v2 memory.events) after the exit. The runc
// process does not die with the agent: a container survives an agent
// restart, and the restarted driver then sees its exit by polling runc's
// state (code -1: the status went to the old agent).
package runc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/oci"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Config configures the runc driver.
type Config struct {
	// Path is the runc binary (default /usr/sbin/runc).
	Path string
	// StateDir holds runc's state (--root) and the driver's records
	// (default /run/warren/runc). Use one per node agent.
	StateDir string
	// CgroupRoot names the cgroup parent when Spec.CgroupParent is empty:
	// the cgroupsPath is then <CgroupRoot>/sbx-<id> (default "/warren").
	CgroupRoot string
	// DefaultPids is the pids limit when Spec.Resources.Pids is 0 (default 4096).
	DefaultPids int64
	// Logger receives the driver's own logs (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Path == "" {
		c.Path = "/usr/sbin/runc"
	}
	if c.StateDir == "" {
		c.StateDir = "/run/warren/runc"
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

// pidFile is the file in the bundle where runc run writes init's host PID
// once init runs.
const pidFile = "init.pid"

// Driver drives runc. Create it with New.
type Driver struct {
	cfg   Config
	cli   oci.CLI
	root  string
	index oci.Index
	log   *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]*box
}

var (
	_ driver.Driver  = (*Driver)(nil)
	_ driver.Freezer = (*Driver)(nil)
)

type box struct {
	cgroupsPath string
	bundleDir   string
	watch       *oci.Watch
	killed      bool
}

// New returns a runc driver. It creates the state directories and checks
// that the binary exists.
func New(cfg Config) (*Driver, error) {
	cfg.setDefaults()
	path, err := exec.LookPath(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("runc binary %q: %v: %w", cfg.Path, err, errdefs.ErrUnavailable)
	}
	cfg.Path = path
	root := filepath.Join(cfg.StateDir, "runtime")
	d := &Driver{
		cfg:       cfg,
		cli:       oci.CLI{Path: path, Global: []string{"--root", root}},
		root:      root,
		index:     oci.Index{Dir: filepath.Join(cfg.StateDir, "sandboxes")},
		log:       cfg.Logger.With("driver", "runc"),
		sandboxes: map[string]*box{},
	}
	for _, dir := range []string{root, d.index.Dir} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return nil, fmt.Errorf("runc state dir: %w", err)
		}
	}
	return d, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return "runc" }

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Freeze: true}
}

// RuntimeRoot is runc's --root directory (for leak checks and tools).
func (d *Driver) RuntimeRoot() string { return d.root }

func (d *Driver) cgroupsPath(s driver.Spec) string {
	if s.CgroupParent != "" {
		return s.CgroupParent
	}
	return filepath.Join(d.cfg.CgroupRoot, sandbox.HostName(s.ID))
}

// Start implements driver.Driver: it writes the bundle, runs `runc run
// --keep` as a child and returns once init runs (runc wrote its PID file).
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (err error) {
	cg := d.cgroupsPath(spec)
	ociSpec, err := oci.Generate(spec, oci.Options{CgroupsPath: cg, DefaultPids: d.cfg.DefaultPids, CgroupNamespace: true})
	if err != nil {
		return err
	}
	d.mu.Lock()
	if _, ok := d.sandboxes[spec.ID]; ok {
		d.mu.Unlock()
		return fmt.Errorf("sandbox %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	b := &box{cgroupsPath: cg, bundleDir: spec.BundleDir, watch: oci.NewWatch()}
	d.sandboxes[spec.ID] = b
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
	logf, release, err := oci.OpenLog(spec.BundleDir, spec.Log)
	if err != nil {
		return fmt.Errorf("sandbox %q: log: %w", spec.ID, err)
	}
	pidPath := filepath.Join(spec.BundleDir, pidFile)
	// Not bound to ctx: the runc process lives as long as the container.
	cmd := d.cli.Command(context.Background(), "run", "--keep", "--bundle", spec.BundleDir, "--pid-file", pidPath, spec.ID)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		release()
		return fmt.Errorf("sandbox %q: runc run: %w", spec.ID, err)
	}
	release()
	exited := make(chan struct{})
	go func() {
		werr := cmd.Wait()
		e := oci.ExitFromCode(oci.ExitCode(cmd.ProcessState))
		if werr != nil && cmd.ProcessState == nil {
			e = driver.Exit{Code: -1}
		}
		close(exited)
		d.finishExit(b, e)
	}()

	// Wait for the PID file (written once init runs) or runc's exit.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(pidPath); err == nil {
			d.log.Debug("sandbox started", "sandbox_id", spec.ID)
			return nil
		}
		select {
		case <-exited:
			if _, err := os.Stat(pidPath); err == nil {
				return nil // init ran and already exited: Wait reports it
			}
			return fmt.Errorf("sandbox %q: runc run: %s", spec.ID, oci.LogTail(spec.BundleDir, spec.Log))
		case <-ctx.Done():
			return fmt.Errorf("sandbox %q: start: %w", spec.ID, ctx.Err())
		case <-tick.C:
		}
	}
}

// cleanupFailed removes what a failed Start left behind.
func (d *Driver) cleanupFailed(id string, b *box) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d.mu.Lock()
	b.killed = true
	d.mu.Unlock()
	if _, err := d.cli.Run(ctx, "delete", "--force", id); err != nil && !oci.NotExist(err) {
		d.log.Warn("delete after failed start", "sandbox_id", id, "err", err)
	}
	select {
	case <-b.watch.Done():
	case <-ctx.Done():
	}
	_ = d.index.Remove(id)
	_ = os.RemoveAll(b.bundleDir)
	d.forget(id, b)
}

func (d *Driver) forget(id string, b *box) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sandboxes[id] == b {
		delete(d.sandboxes, id)
	}
}

// finishExit adds what the cgroup and the driver know to e and records it.
func (d *Driver) finishExit(b *box, e driver.Exit) {
	if n, err := oci.OOMKills(b.cgroupsPath); err == nil && n > 0 {
		e.OOM, e.Signaled = true, true
		if e.Code < 0 {
			e.Code = 128 + int(unix.SIGKILL)
		}
	}
	d.mu.Lock()
	killed := b.killed
	d.mu.Unlock()
	if killed && !e.OOM && e.Code < 0 {
		e = driver.Exit{Code: 128 + int(unix.SIGKILL), Signaled: true}
	}
	b.watch.Finish(e, nil)
}

// lookup returns the in-memory box of id, recovering it from the index for
// a container started by an earlier run of the agent.
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
	d.mu.Lock()
	if cur, ok := d.sandboxes[id]; ok {
		d.mu.Unlock()
		return cur, nil
	}
	d.sandboxes[id] = b
	d.mu.Unlock()
	go d.pollExit(id, b)
	return b, nil
}

// pollExit watches a recovered container (not our child) until it stops.
func (d *Driver) pollExit(id string, b *box) {
	for {
		st, err := d.cli.State(context.Background(), id)
		if err != nil || oci.DriverState(st.Status) == driver.StateStopped {
			d.finishExit(b, driver.Exit{Code: -1})
			return
		}
		select {
		case <-b.watch.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
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

// Exec implements driver.Driver with `runc exec --process`.
func (d *Driver) Exec(ctx context.Context, id string, p driver.Process) (int, error) {
	b, err := d.lookup(ctx, id)
	if err != nil {
		return -1, err
	}
	if b.watch.Finished() {
		return -1, fmt.Errorf("sandbox %q is stopped: %w", id, errdefs.ErrConflict)
	}
	code, err := d.cli.Exec(ctx, id, b.bundleDir, p, oci.ExecOptions{})
	if err != nil || code == 0 {
		return code, err
	}
	// runc fails with a non-zero code when it cannot exec (paused,
	// stopped): tell that apart from the process's own code by the state.
	st, serr := d.Status(ctx, id)
	if serr != nil {
		return -1, serr
	}
	if st.State != driver.StateRunning {
		return -1, fmt.Errorf("sandbox %q is %s: %w", id, st.State, errdefs.ErrConflict)
	}
	return code, nil
}

// Kill implements driver.Driver: SIGKILL to every process of the container
// (a frozen one is thawed so that the signal lands).
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
	st, err := d.cli.State(ctx, id)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil
		}
		return err
	}
	state := oci.DriverState(st.Status)
	if state == driver.StateStopped {
		return nil
	}
	if _, err := d.cli.Run(ctx, "kill", "--all", id, "KILL"); err != nil {
		if cur, serr := d.cli.State(ctx, id); serr == nil && oci.DriverState(cur.Status) == driver.StateStopped {
			return nil
		}
		return fmt.Errorf("sandbox %q: kill: %w", id, err)
	}
	if state == driver.StateFrozen {
		// runc kill --all thaws the cgroup itself on cgroup v1; where it
		// did not, thaw it so that the signal lands.
		if cur, err := d.cli.State(ctx, id); err == nil && oci.DriverState(cur.Status) == driver.StateFrozen {
			if _, err := d.cli.Run(ctx, "resume", id); err != nil {
				return fmt.Errorf("sandbox %q: resume to kill: %w", id, err)
			}
		}
	}
	return nil
}

// Delete implements driver.Driver: `runc delete --force`, then the bundle
// and the record.
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
	} else if st, err := d.cli.State(ctx, id); err == nil {
		bundleDir = st.Bundle
	}
	if ok && !b.watch.Finished() {
		// Kill and wait for our runc run to report the exit: faster than
		// letting delete --force poll for the container to stop.
		if err := d.Kill(ctx, id); err == nil {
			select {
			case <-b.watch.Done():
			case <-time.After(10 * time.Second):
			}
		}
	}
	if ok {
		d.mu.Lock()
		b.killed = true
		d.mu.Unlock()
	}
	if _, err := d.cli.Run(ctx, "delete", "--force", id); err != nil && !oci.NotExist(err) {
		return fmt.Errorf("sandbox %q: delete: %w", id, err)
	}
	if ok {
		select {
		case <-b.watch.Done():
		case <-ctx.Done():
			return fmt.Errorf("sandbox %q: delete: %w", id, ctx.Err())
		}
		d.forget(id, b)
	}
	if bundleDir != "" {
		if err := os.RemoveAll(bundleDir); err != nil {
			return fmt.Errorf("sandbox %q: remove bundle: %w", id, err)
		}
	}
	return d.index.Remove(id)
}

// Status implements driver.Driver.
func (d *Driver) Status(ctx context.Context, id string) (driver.Status, error) {
	d.mu.Lock()
	b, ok := d.sandboxes[id]
	d.mu.Unlock()
	if ok && b.watch.Finished() {
		return driver.Status{ID: id, State: driver.StateStopped}, nil
	}
	st, err := d.cli.State(ctx, id)
	if errdefs.IsNotFound(err) {
		if _, ierr := d.index.Get(id); ok || ierr == nil {
			return driver.Status{ID: id, State: driver.StateStopped}, nil
		}
	}
	if err != nil {
		return driver.Status{}, err
	}
	state := oci.DriverState(st.Status)
	pid := st.Pid
	if state == driver.StateStopped {
		pid = 0
	}
	return driver.Status{ID: id, State: state, InitPID: pid}, nil
}

// List implements driver.Driver: every container runc knows under the
// driver's root, and every sandbox with a record.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	ids, err := d.cli.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("runc list: %w", err)
	}
	recs, err := d.index.IDs()
	if err != nil {
		return nil, err
	}
	return oci.MergeIDs(ids, recs), nil
}

// Freeze implements driver.Freezer with `runc pause` (cgroup freezer).
func (d *Driver) Freeze(ctx context.Context, id string) error {
	return d.setFrozen(ctx, id, "pause", driver.StateFrozen)
}

// Thaw implements driver.Freezer with `runc resume`.
func (d *Driver) Thaw(ctx context.Context, id string) error {
	return d.setFrozen(ctx, id, "resume", driver.StateRunning)
}

func (d *Driver) setFrozen(ctx context.Context, id, verb string, want driver.State) error {
	if _, err := d.lookup(ctx, id); err != nil {
		return err
	}
	_, err := d.cli.Run(ctx, verb, id)
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
