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
	"path/filepath"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/oci"
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
	cfg Config
	rt  *oci.Runtime
	cli oci.CLI
	log *slog.Logger
}

var (
	_ driver.Driver  = (*Driver)(nil)
	_ driver.Freezer = (*Driver)(nil)
)

// New returns a runc driver. It creates the state directories and checks
// that the binary exists. Off Linux it fails with errdefs.ErrUnavailable.
func New(cfg Config) (*Driver, error) {
	cfg.setDefaults()
	d := &Driver{log: cfg.Logger.With("driver", "runc")}
	rt, err := oci.NewRuntime(oci.RuntimeConfig{
		Name:        "runc",
		Path:        cfg.Path,
		StateDir:    cfg.StateDir,
		CgroupRoot:  cfg.CgroupRoot,
		DefaultPids: cfg.DefaultPids,
		Watch:       func(id string, b *oci.Box) { go d.pollExit(id, b) },
	})
	if err != nil {
		return nil, err
	}
	d.rt, d.cli = rt, rt.CLI()
	cfg.Path = d.cli.Path
	d.cfg = cfg
	return d, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return "runc" }

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Freeze: true}
}

// RuntimeRoot is runc's --root directory (for leak checks and tools).
func (d *Driver) RuntimeRoot() string { return d.rt.Root() }

// Start implements driver.Driver: it writes the bundle, runs `runc run
// --keep` as a child and returns once init runs (runc wrote its PID file).
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (err error) {
	b, err := d.rt.Prepare(spec, oci.Options{CgroupNamespace: true})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			d.cleanupFailed(spec.ID, b)
		}
	}()
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
		d.rt.FinishExit(b, e)
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
func (d *Driver) cleanupFailed(id string, b *oci.Box) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.MarkDeleting()
	if _, err := d.cli.Run(ctx, "delete", "--force", id); err != nil && !d.cli.Absent(ctx, id, err) {
		d.log.Warn("delete after failed start", "sandbox_id", id, "err", err)
	}
	select {
	case <-b.Watch.Done():
	case <-ctx.Done():
	}
	d.rt.Discard(id, b)
}

// pollExit watches a recovered container (not our child) until it stops.
func (d *Driver) pollExit(id string, b *oci.Box) {
	for {
		st, err := d.cli.State(context.Background(), id)
		if err != nil || oci.DriverState(st.Status) == driver.StateStopped {
			d.rt.FinishExit(b, driver.Exit{Code: -1})
			return
		}
		select {
		case <-b.Watch.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Wait implements driver.Driver.
func (d *Driver) Wait(ctx context.Context, id string) (driver.Exit, error) {
	return d.rt.Wait(ctx, id)
}

// Exec implements driver.Driver with `runc exec --process`; cancelling ctx
// sends SIGTERM to the runc exec client, which forwards it.
func (d *Driver) Exec(ctx context.Context, id string, p driver.Process) (int, error) {
	return d.rt.Exec(ctx, id, p, oci.ExecOptions{})
}

// Kill implements driver.Driver: SIGKILL to every process of the container
// (a frozen one is thawed so that the signal lands).
func (d *Driver) Kill(ctx context.Context, id string) error {
	st, ok, err := d.rt.BeginKill(ctx, id)
	if !ok || err != nil {
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
	return d.rt.Delete(ctx, id, d.deleteContainer)
}

// deleteContainer is Delete's runc part: b (nil when the driver holds no
// box) is killed and its runc run's exit awaited, then runc forgets it.
func (d *Driver) deleteContainer(ctx context.Context, id string, b *oci.Box) error {
	if b != nil && !b.Watch.Finished() {
		// Kill and wait for our runc run to report the exit: faster than
		// letting delete --force poll for the container to stop.
		if err := d.Kill(ctx, id); err == nil {
			select {
			case <-b.Watch.Done():
			case <-time.After(10 * time.Second):
			}
		}
	}
	if b != nil {
		b.MarkDeleting()
	}
	if _, err := d.cli.Run(ctx, "delete", "--force", id); err != nil && !d.cli.Absent(ctx, id, err) {
		return fmt.Errorf("sandbox %q: delete: %w", id, err)
	}
	if b != nil {
		select {
		case <-b.Watch.Done():
		case <-ctx.Done():
			return fmt.Errorf("sandbox %q: delete: %w", id, ctx.Err())
		}
	}
	return nil
}

// Status implements driver.Driver.
func (d *Driver) Status(ctx context.Context, id string) (driver.Status, error) {
	return d.rt.Status(ctx, id)
}

// List implements driver.Driver: every container runc knows under the
// driver's root, and every sandbox with a record.
func (d *Driver) List(ctx context.Context) ([]string, error) { return d.rt.List(ctx) }

// Freeze implements driver.Freezer with `runc pause` (cgroup freezer).
func (d *Driver) Freeze(ctx context.Context, id string) error { return d.rt.Freeze(ctx, id) }

// Thaw implements driver.Freezer with `runc resume`.
func (d *Driver) Thaw(ctx context.Context, id string) error { return d.rt.Thaw(ctx, id) }
