package oci

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Runtime is the half of an OCI driver that does not depend on which
// runtime binary it drives: the sandboxes it holds in memory (Box) and on
// disk (Index), how an exit is completed (OOM, the driver's own kill, a
// checkpoint), the driver.Driver methods whose logic runc and runsc share
// (Wait, Status, List, Freeze, Thaw) and the shared steps of Start, Exec,
// Kill and Delete. A driver keeps what differs: how it starts a sandbox,
// how it learns of an exit, and how it kills and deletes.
//
// Layout under RuntimeConfig.StateDir:
//
//	runtime/     the runtime's --root: its own container state
//	sandboxes/   one Record per sandbox (Index)
type Runtime struct {
	name        string
	cli         CLI
	root        string
	index       Index
	cgroupRoot  string
	defaultPids int64
	checkAlive  bool
	adopt       func(ctx context.Context, id string, b *Box)
	watch       func(id string, b *Box)

	mu    sync.Mutex
	boxes map[string]*Box
}

// RuntimeConfig configures a Runtime; the driver fills in every field.
type RuntimeConfig struct {
	// Name is the runtime's name in messages: "runc", "runsc".
	Name string
	// Path is the runtime binary, looked up in $PATH when not a path.
	Path string
	// StateDir holds the runtime's --root and the records (see Runtime).
	StateDir string
	// Flags follow --root in every invocation, before the subcommand.
	Flags []string
	// CgroupRoot names the cgroup parent when Spec.CgroupParent is empty:
	// the cgroupsPath is then <CgroupRoot>/sbx-<id>.
	CgroupRoot string
	// DefaultPids is the pids limit when Spec.Resources.Pids is 0.
	DefaultPids int64
	// CheckAlive makes Status read a sandbox whose runtime process is a
	// zombie or gone as stopped, whatever the runtime's state says (runsc
	// keeps saying running).
	CheckAlive bool
	// Adopt, optional, is called by Lookup with a box made from the record
	// of a sandbox that an earlier run of the agent started, before any
	// other caller sees it: it finishes b.Watch when the sandbox is gone.
	Adopt func(ctx context.Context, id string, b *Box)
	// Watch is called by Lookup once an adopted box is registered and its
	// watch is not finished: it arranges for FinishExit when init exits.
	Watch func(id string, b *Box)
}

// NewRuntime looks up the binary and creates the state directories.
// Off Linux it fails with errdefs.ErrUnavailable.
func NewRuntime(cfg RuntimeConfig) (*Runtime, error) {
	if err := platformSupported(); err != nil {
		return nil, fmt.Errorf("%s driver: %w", cfg.Name, err)
	}
	path, err := exec.LookPath(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("%s binary %q: %v: %w", cfg.Name, cfg.Path, err, errdefs.ErrUnavailable)
	}
	root := filepath.Join(cfg.StateDir, "runtime")
	r := &Runtime{
		name:        cfg.Name,
		cli:         CLI{Path: path, Global: append([]string{"--root", root}, cfg.Flags...)},
		root:        root,
		index:       Index{Dir: filepath.Join(cfg.StateDir, "sandboxes")},
		cgroupRoot:  cfg.CgroupRoot,
		defaultPids: cfg.DefaultPids,
		checkAlive:  cfg.CheckAlive,
		adopt:       cfg.Adopt,
		watch:       cfg.Watch,
		boxes:       map[string]*Box{},
	}
	for _, dir := range []string{root, r.index.Dir} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return nil, fmt.Errorf("%s state dir: %w", cfg.Name, err)
		}
	}
	return r, nil
}

// CLI is the client for commands on existing containers: the resolved
// binary with --root and RuntimeConfig.Flags.
func (r *Runtime) CLI() CLI { return r.cli }

// Root is the runtime's --root directory.
func (r *Runtime) Root() string { return r.root }

// Index holds the records of the driver's sandboxes.
func (r *Runtime) Index() Index { return r.index }

// Len is the number of sandboxes held in memory.
func (r *Runtime) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.boxes)
}

// Box is what a driver holds in memory for one sandbox it started,
// restored or found in its index.
type Box struct {
	CgroupsPath string
	BundleDir   string
	Watch       *Watch

	mu         sync.Mutex
	killed     bool      // Kill or Delete was called: an exit without a status is our SIGKILL
	checkpoint bool      // a checkpoint without LeaveRunning is stopping it: the exit is clean
	deleting   bool      // Delete runs: the end of the watcher is final
	watcher    *exec.Cmd // the process that watches the exit, if Delete may have to end it
}

func newBox(cgroupsPath, bundleDir string) *Box {
	return &Box{CgroupsPath: cgroupsPath, BundleDir: bundleDir, Watch: NewWatch()}
}

// MarkKilled records that the driver is killing the sandbox.
func (b *Box) MarkKilled() {
	b.mu.Lock()
	b.killed = true
	b.mu.Unlock()
}

// MarkDeleting records that Delete (or a failed start's clean-up) is
// removing the sandbox, which counts as a kill, and returns the watcher.
func (b *Box) MarkDeleting() *exec.Cmd {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.killed, b.deleting = true, true
	return b.watcher
}

// Deleting reports whether MarkDeleting was called.
func (b *Box) Deleting() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.deleting
}

// SetCheckpointing records whether a checkpoint without LeaveRunning is
// stopping the sandbox: its exit then reads as a clean one.
func (b *Box) SetCheckpointing(on bool) {
	b.mu.Lock()
	b.checkpoint = on
	b.mu.Unlock()
}

// SetWatcher records the process that watches the sandbox's exit.
func (b *Box) SetWatcher(cmd *exec.Cmd) {
	b.mu.Lock()
	b.watcher = cmd
	b.mu.Unlock()
}

// Watcher returns the process that watches the sandbox's exit, if any.
func (b *Box) Watcher() *exec.Cmd {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.watcher
}

// FinishExit completes e with what the cgroup and the driver know (an OOM
// kill, the driver's own kill, a checkpoint) and records it in b.Watch.
// Read the cgroup before the runtime removes it.
func (r *Runtime) FinishExit(b *Box, e driver.Exit) {
	sigkill := 128 + int(syscall.SIGKILL)
	if n, err := OOMKills(b.CgroupsPath); err == nil && n > 0 {
		e.OOM, e.Signaled = true, true
		if e.Code < 0 {
			e.Code = sigkill
		}
	}
	b.mu.Lock()
	killed, ckpt := b.killed, b.checkpoint
	b.mu.Unlock()
	switch {
	case ckpt:
		e = driver.Exit{Code: 0}
	case killed && !e.OOM && e.Code < 0:
		e = driver.Exit{Code: sigkill, Signaled: true}
	}
	b.Watch.Finish(e, nil)
}

// Prepare is the first half of a start or restore: it generates the OCI
// spec (o.CgroupsPath and o.DefaultPids are the runtime's), reserves
// spec.ID (errdefs.ErrAlreadyExists when this driver holds it in memory or
// on disk), and writes the bundle and the record. On an error it leaves
// nothing behind; after it, the caller cleans up with Discard.
func (r *Runtime) Prepare(spec driver.Spec, o Options) (*Box, error) {
	o.CgroupsPath = spec.CgroupParent
	if o.CgroupsPath == "" {
		o.CgroupsPath = filepath.Join(r.cgroupRoot, sandbox.HostName(spec.ID))
	}
	o.DefaultPids = r.defaultPids
	ociSpec, err := Generate(spec, o)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if _, ok := r.boxes[spec.ID]; ok {
		r.mu.Unlock()
		return nil, fmt.Errorf("sandbox %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	b := newBox(o.CgroupsPath, spec.BundleDir)
	r.boxes[spec.ID] = b // reserves the ID
	r.mu.Unlock()
	if _, err := r.index.Get(spec.ID); err == nil {
		r.forget(spec.ID, b)
		return nil, fmt.Errorf("sandbox %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	err = WriteBundle(spec, ociSpec)
	if err == nil {
		err = r.index.Put(Record{ID: spec.ID, BundleDir: spec.BundleDir, CgroupsPath: o.CgroupsPath})
	}
	if err != nil {
		b.Watch.Finish(driver.Exit{Code: -1}, fmt.Errorf("sandbox %q: start failed: %w", spec.ID, errdefs.ErrNotFound))
		r.Discard(spec.ID, b)
		return nil, err
	}
	return b, nil
}

// Discard removes the record and the bundle of a sandbox whose start
// failed and forgets it; the runtime's side is the caller's.
func (r *Runtime) Discard(id string, b *Box) {
	_ = r.index.Remove(id)
	_ = os.RemoveAll(b.BundleDir)
	r.forget(id, b)
}

func (r *Runtime) forget(id string, b *Box) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.boxes[id] == b {
		delete(r.boxes, id)
	}
}

// Lookup returns the box of id, recovering it from the index for a
// sandbox started by an earlier run of the agent (see RuntimeConfig.Adopt
// and Watch); errdefs.ErrNotFound when there is neither.
func (r *Runtime) Lookup(ctx context.Context, id string) (*Box, error) {
	r.mu.Lock()
	b, ok := r.boxes[id]
	r.mu.Unlock()
	if ok {
		return b, nil
	}
	rec, err := r.index.Get(id)
	if err != nil {
		return nil, err
	}
	b = newBox(rec.CgroupsPath, rec.BundleDir)
	if rec.Stopped {
		b.Watch.Finish(rec.Exit, nil)
	} else if r.adopt != nil {
		r.adopt(ctx, id, b)
	}
	r.mu.Lock()
	if cur, ok := r.boxes[id]; ok {
		r.mu.Unlock()
		return cur, nil
	}
	r.boxes[id] = b
	r.mu.Unlock()
	if !b.Watch.Finished() {
		r.watch(id, b)
	}
	return b, nil
}

// Wait implements driver.Driver.
func (r *Runtime) Wait(ctx context.Context, id string) (driver.Exit, error) {
	b, err := r.Lookup(ctx, id)
	if err != nil {
		return driver.Exit{}, err
	}
	e, err := b.Watch.Wait(ctx)
	if err != nil {
		return driver.Exit{}, fmt.Errorf("sandbox %q: wait: %w", id, err)
	}
	return e, nil
}

// Exec implements driver.Driver with `exec --process` (see CLI.Exec for
// o). A non-zero code is the process's only while the sandbox runs: the
// runtimes also fail with one when they cannot exec (paused, stopped).
func (r *Runtime) Exec(ctx context.Context, id string, p driver.Process, o ExecOptions) (int, error) {
	b, err := r.Lookup(ctx, id)
	if err != nil {
		return -1, err
	}
	if b.Watch.Finished() {
		return -1, fmt.Errorf("sandbox %q is stopped: %w", id, errdefs.ErrConflict)
	}
	code, err := r.cli.Exec(ctx, id, b.BundleDir, p, o)
	if err != nil || code == 0 {
		return code, err
	}
	if o.CannotExecCode != 0 && code == o.CannotExecCode {
		// A sandbox that died under the exec still reads as running for
		// a moment: give its watch a chance to see the exit.
		select {
		case <-b.Watch.Done():
			return -1, fmt.Errorf("sandbox %q stopped during exec: %w", id, errdefs.ErrConflict)
		case <-time.After(2 * time.Second):
		}
	}
	st, err := r.Status(ctx, id)
	if err != nil {
		return -1, err
	}
	if st.State != driver.StateRunning {
		return -1, fmt.Errorf("sandbox %q is %s: %w", id, st.State, errdefs.ErrConflict)
	}
	return code, nil
}

// BeginKill is the first half of Kill: it marks the box of id killed and
// returns the runtime's state of it; ok is false when there is nothing
// left to kill (its exit is known, or the runtime knows no such container).
func (r *Runtime) BeginKill(ctx context.Context, id string) (st RuntimeState, ok bool, err error) {
	b, err := r.Lookup(ctx, id)
	if err != nil {
		return RuntimeState{}, false, err
	}
	if b.Watch.Finished() {
		return RuntimeState{}, false, nil
	}
	b.MarkKilled()
	st, err = r.cli.State(ctx, id)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return RuntimeState{}, false, nil
		}
		return RuntimeState{}, false, err
	}
	return st, true, nil
}

// Delete implements driver.Driver around stop, which removes the container
// from the runtime and, when the driver holds b (nil otherwise), waits for
// its watch; Delete then forgets b and removes the bundle and the record.
func (r *Runtime) Delete(ctx context.Context, id string, stop func(ctx context.Context, id string, b *Box) error) error {
	if !sandbox.ValidID(id) {
		return nil
	}
	r.mu.Lock()
	b := r.boxes[id]
	r.mu.Unlock()
	bundleDir := ""
	if b != nil {
		bundleDir = b.BundleDir
	} else if rec, err := r.index.Get(id); err == nil {
		bundleDir = rec.BundleDir
	} else if st, err := r.cli.State(ctx, id); err == nil {
		bundleDir = st.Bundle
	}
	if err := stop(ctx, id, b); err != nil {
		return err
	}
	if b != nil {
		r.forget(id, b)
	}
	if bundleDir != "" {
		if err := os.RemoveAll(bundleDir); err != nil {
			return fmt.Errorf("sandbox %q: remove bundle: %w", id, err)
		}
	}
	return r.index.Remove(id)
}

// Status implements driver.Driver.
func (r *Runtime) Status(ctx context.Context, id string) (driver.Status, error) {
	r.mu.Lock()
	b, ok := r.boxes[id]
	r.mu.Unlock()
	if ok && b.Watch.Finished() {
		return driver.Status{ID: id, State: driver.StateStopped}, nil
	}
	st, err := r.cli.State(ctx, id)
	if errdefs.IsNotFound(err) {
		if ok {
			return driver.Status{ID: id, State: driver.StateStopped}, nil
		}
		if _, ierr := r.index.Get(id); ierr == nil {
			return driver.Status{ID: id, State: driver.StateStopped}, nil
		}
	}
	if err != nil {
		return driver.Status{}, err
	}
	state := DriverState(st.Status)
	pid := st.Pid
	if r.checkAlive && state != driver.StateStopped && !ProcessAlive(pid) {
		state = driver.StateStopped // a zombie sandbox process reads as running
	}
	if state == driver.StateStopped || pid < 0 {
		pid = 0
	}
	return driver.Status{ID: id, State: state, InitPID: pid}, nil
}

// List implements driver.Driver: every container the runtime knows under
// its root, and every sandbox with a record.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	ids, err := r.cli.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s list: %w", r.name, err)
	}
	recs, err := r.index.IDs()
	if err != nil {
		return nil, err
	}
	return MergeIDs(ids, recs), nil
}

// Freeze implements driver.Freezer with the runtime's `pause`.
func (r *Runtime) Freeze(ctx context.Context, id string) error {
	return r.setFrozen(ctx, id, "pause", driver.StateFrozen)
}

// Thaw implements driver.Freezer with the runtime's `resume`.
func (r *Runtime) Thaw(ctx context.Context, id string) error {
	return r.setFrozen(ctx, id, "resume", driver.StateRunning)
}

func (r *Runtime) setFrozen(ctx context.Context, id, verb string, want driver.State) error {
	if _, err := r.Lookup(ctx, id); err != nil {
		return err
	}
	_, err := r.cli.Run(ctx, verb, id)
	if err == nil {
		return nil
	}
	st, serr := r.Status(ctx, id)
	if serr != nil {
		return serr
	}
	if st.State == want {
		return nil
	}
	return fmt.Errorf("sandbox %q is %s: %s: %v: %w", id, st.State, verb, err, errdefs.ErrConflict)
}
