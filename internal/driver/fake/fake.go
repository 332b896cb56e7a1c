// Package fake is an in-memory runtime driver for tests of the node agent
// and the control plane. It runs no processes: each sandbox is a small state
// machine whose behaviour is scripted by a Behavior (start error, start hang,
// init exit after a duration or after N execs with a code, OOM), and whose
// calls are recorded so that tests can assert on them.
//
// Freeze/Thaw and Checkpoint/Restore work in memory; Checkpoint writes a
// small JSON file (CheckpointFile) into its directory so that callers see an
// image on disk, and Restore reads it back.
//
// Every method is safe for concurrent use; tests may script behaviours and
// trigger exits (Exit, OOMKill) from any goroutine.
package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// CheckpointFile is the name of the file Checkpoint writes into its dir.
const CheckpointFile = "fake-checkpoint.json"

// ExecFunc handles an Exec call in place of a real process: it may write to
// p.Stdout and p.Stderr and returns the exit code.
type ExecFunc func(ctx context.Context, id string, p driver.Process) (int, error)

// Behavior scripts one sandbox. The zero value is a sandbox that starts at
// once, runs until killed and answers every Exec with exit code 0.
type Behavior struct {
	// StartErr makes Start and Restore fail with this error (nothing is
	// created).
	StartErr error
	// StartHang makes Start and Restore block until their ctx ends; they
	// then fail with the context's error and nothing is created.
	StartHang bool
	// StartDelay makes Start and Restore take this long (or until ctx ends).
	StartDelay time.Duration

	// ExitAfter, when positive, makes init exit this long after it started
	// (timers run on the time package's clock, so testing/synctest works).
	ExitAfter time.Duration
	// ExitAfterExecs, when positive, makes init exit right after this many
	// Exec calls completed.
	ExitAfterExecs int
	// ExitCode is the code reported when init exits by itself.
	ExitCode int
	// OOM makes the scripted exit an out-of-memory kill (code 137, Signaled
	// and OOM set) instead of a clean exit with ExitCode.
	OOM bool

	// Exec handles Exec calls; nil answers exit code 0 and writes nothing.
	Exec ExecFunc

	// Errors returned by the optional features.
	ExecErr, FreezeErr, ThawErr, CheckpointErr, RestoreErr, KillErr, DeleteErr error
}

// Config configures a fake driver.
type Config struct {
	// Default is the behaviour of every sandbox without its own.
	Default Behavior
	// Behavior, when set, chooses the behaviour of each new sandbox from its
	// spec (it wins over Default; SetBehavior wins over both).
	Behavior func(spec driver.Spec) Behavior
	// Capabilities overrides the advertised capabilities. Nil means
	// {Freeze, MemoryCheckpoint}. A feature advertised as missing makes its
	// methods fail with errdefs.ErrUnsupported.
	Capabilities *driver.Capabilities
	// Name overrides Name(); default "fake".
	Name string
}

// Call is one recorded driver call.
type Call struct {
	Op   string // "start", "exec", "wait", "kill", "delete", "freeze", "thaw", "checkpoint", "restore", "resize"
	ID   string
	Args []string // Exec args
	Dir  string   // checkpoint/restore dir
	Err  error    // what the call returned
}

// Driver is the fake driver.
type Driver struct {
	cfg Config

	mu        sync.Mutex
	sandboxes map[string]*box
	scripted  map[string]Behavior
	calls     []Call
	nextPID   int
}

var (
	_ driver.Driver       = (*Driver)(nil)
	_ driver.Freezer      = (*Driver)(nil)
	_ driver.Checkpointer = (*Driver)(nil)
	_ driver.Resizer      = (*Driver)(nil)
)

type box struct {
	spec     driver.Spec
	beh      Behavior
	state    driver.State
	pid      int
	execs    int
	counter  int64 // "memory": survives checkpoint/restore
	done     chan struct{}
	exit     driver.Exit
	timer    *time.Timer
	restored string // dir restored from, if any
	limits   sandbox.Resources
}

// image is what Checkpoint writes.
type image struct {
	ID      string `json:"id"`
	Execs   int    `json:"execs"`
	Counter int64  `json:"counter"`
}

// New returns a fake driver.
func New(cfg Config) *Driver {
	return &Driver{
		cfg:       cfg,
		sandboxes: map[string]*box{},
		scripted:  map[string]Behavior{},
		nextPID:   1000,
	}
}

// Name implements driver.Driver.
func (d *Driver) Name() string {
	if d.cfg.Name != "" {
		return d.cfg.Name
	}
	return "fake"
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	if d.cfg.Capabilities != nil {
		return *d.cfg.Capabilities
	}
	return driver.Capabilities{Freeze: true, MemoryCheckpoint: true}
}

// SetBehavior scripts the sandbox with this ID; it applies to a later Start
// or Restore of that ID.
func (d *Driver) SetBehavior(id string, b Behavior) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.scripted[id] = b
}

// Calls returns a copy of every call recorded so far, oldest first.
func (d *Driver) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

// CallsOf returns the recorded calls with operation op.
func (d *Driver) CallsOf(op string) []Call {
	var out []Call
	for _, c := range d.Calls() {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// Spec returns the spec a sandbox was started with.
func (d *Driver) Spec(id string) (driver.Spec, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.sandboxes[id]
	if !ok {
		return driver.Spec{}, false
	}
	return b.spec, true
}

// Counter returns the sandbox's in-memory counter: the number of Exec calls
// it has run, carried over by Checkpoint and Restore. It stands in for the
// memory state that a real checkpoint keeps.
func (d *Driver) Counter(id string) (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.sandboxes[id]
	if !ok {
		return 0, false
	}
	return b.counter, true
}

// Exit makes the init of a running or frozen sandbox exit with code now.
func (d *Driver) Exit(id string, code int) error {
	return d.finish(id, driver.Exit{Code: code})
}

// OOMKill makes the init of a running sandbox die by its memory limit now.
func (d *Driver) OOMKill(id string) error {
	return d.finish(id, driver.Exit{Code: 137, Signaled: true, OOM: true})
}

func (d *Driver) finish(id string, e driver.Exit) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.sandboxes[id]
	if !ok {
		return notFound(id)
	}
	if b.state == driver.StateStopped {
		return fmt.Errorf("sandbox %q is stopped: %w", id, errdefs.ErrConflict)
	}
	d.stopLocked(b, e)
	return nil
}

func notFound(id string) error { return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound) }

func (d *Driver) record(c Call) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, c)
}

func (d *Driver) behaviorFor(spec driver.Spec) Behavior {
	d.mu.Lock()
	b, ok := d.scripted[spec.ID]
	d.mu.Unlock()
	if ok {
		return b
	}
	if d.cfg.Behavior != nil {
		return d.cfg.Behavior(spec)
	}
	return d.cfg.Default
}

// Start implements driver.Driver.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (err error) {
	defer func() { d.record(Call{Op: "start", ID: spec.ID, Args: spec.Init.Args, Err: err}) }()
	return d.create(ctx, spec, nil, "")
}

func (d *Driver) create(ctx context.Context, spec driver.Spec, img *image, dir string) error {
	if !sandbox.ValidID(spec.ID) {
		return fmt.Errorf("sandbox %q: bad ID: %w", spec.ID, errdefs.ErrInvalid)
	}
	beh := d.behaviorFor(spec)
	if beh.StartErr != nil {
		return fmt.Errorf("sandbox %q: start: %w", spec.ID, beh.StartErr)
	}
	if img != nil && beh.RestoreErr != nil {
		return fmt.Errorf("sandbox %q: restore: %w", spec.ID, beh.RestoreErr)
	}
	if beh.StartHang {
		<-ctx.Done()
		return fmt.Errorf("sandbox %q: start: %w", spec.ID, ctx.Err())
	}
	if beh.StartDelay > 0 {
		t := time.NewTimer(beh.StartDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sandbox %q: start: %w", spec.ID, ctx.Err())
		case <-t.C:
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sandbox %q: start: %w", spec.ID, err)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.sandboxes[spec.ID]; ok {
		return fmt.Errorf("sandbox %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	d.nextPID++
	b := &box{
		spec:     spec,
		beh:      beh,
		state:    driver.StateRunning,
		pid:      d.nextPID,
		done:     make(chan struct{}),
		restored: dir,
		limits:   spec.Resources,
	}
	if img != nil {
		b.counter = img.Counter
	}
	d.sandboxes[spec.ID] = b
	if beh.ExitAfter > 0 {
		b.timer = time.AfterFunc(beh.ExitAfter, func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.sandboxes[spec.ID] == b && b.state != driver.StateStopped {
				d.stopLocked(b, scriptedExit(beh))
			}
		})
	}
	return nil
}

func scriptedExit(b Behavior) driver.Exit {
	if b.OOM {
		return driver.Exit{Code: 137, Signaled: true, OOM: true}
	}
	return driver.Exit{Code: b.ExitCode}
}

// stopLocked moves b to stopped with exit e and wakes waiters. d.mu is held.
func (d *Driver) stopLocked(b *box, e driver.Exit) {
	if b.state == driver.StateStopped {
		return
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	e.At = time.Now()
	b.exit = e
	b.state = driver.StateStopped
	b.pid = 0
	close(b.done)
}

// Exec implements driver.Driver.
func (d *Driver) Exec(ctx context.Context, id string, p driver.Process) (code int, err error) {
	defer func() { d.record(Call{Op: "exec", ID: id, Args: p.Args, Err: err}) }()
	d.mu.Lock()
	b, ok := d.sandboxes[id]
	if !ok {
		d.mu.Unlock()
		return -1, notFound(id)
	}
	if b.state != driver.StateRunning {
		st := b.state
		d.mu.Unlock()
		return -1, fmt.Errorf("sandbox %q is %s: %w", id, st, errdefs.ErrConflict)
	}
	beh := b.beh
	d.mu.Unlock()

	if beh.ExecErr != nil {
		return -1, fmt.Errorf("sandbox %q: exec: %w", id, beh.ExecErr)
	}
	if len(p.Args) == 0 {
		return -1, fmt.Errorf("sandbox %q: exec: no args: %w", id, errdefs.ErrInvalid)
	}
	if beh.Exec != nil {
		code, err = beh.Exec(ctx, id, p)
		if err != nil {
			return code, fmt.Errorf("sandbox %q: exec: %w", id, err)
		}
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	b.execs++
	b.counter++
	if beh.ExitAfterExecs > 0 && b.execs >= beh.ExitAfterExecs {
		d.stopLocked(b, scriptedExit(beh))
	}
	return code, nil
}

// Wait implements driver.Driver.
func (d *Driver) Wait(ctx context.Context, id string) (driver.Exit, error) {
	d.mu.Lock()
	b, ok := d.sandboxes[id]
	d.mu.Unlock()
	if !ok {
		return driver.Exit{}, notFound(id)
	}
	select {
	case <-b.done:
		d.mu.Lock()
		defer d.mu.Unlock()
		return b.exit, nil
	case <-ctx.Done():
		return driver.Exit{}, fmt.Errorf("sandbox %q: wait: %w", id, ctx.Err())
	}
}

// Kill implements driver.Driver.
func (d *Driver) Kill(ctx context.Context, id string) (err error) {
	defer func() { d.record(Call{Op: "kill", ID: id, Err: err}) }()
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.sandboxes[id]
	if !ok {
		return notFound(id)
	}
	if b.beh.KillErr != nil {
		return fmt.Errorf("sandbox %q: kill: %w", id, b.beh.KillErr)
	}
	d.stopLocked(b, driver.Exit{Code: 137, Signaled: true})
	return nil
}

// Delete implements driver.Driver.
func (d *Driver) Delete(ctx context.Context, id string) (err error) {
	defer func() { d.record(Call{Op: "delete", ID: id, Err: err}) }()
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.sandboxes[id]
	if !ok {
		return nil
	}
	if b.beh.DeleteErr != nil {
		return fmt.Errorf("sandbox %q: delete: %w", id, b.beh.DeleteErr)
	}
	d.stopLocked(b, driver.Exit{Code: 137, Signaled: true})
	delete(d.sandboxes, id)
	return nil
}

// Status implements driver.Driver.
func (d *Driver) Status(ctx context.Context, id string) (driver.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.sandboxes[id]
	if !ok {
		return driver.Status{}, notFound(id)
	}
	return driver.Status{ID: id, State: b.state, InitPID: b.pid}, nil
}

// List implements driver.Driver.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]string, 0, len(d.sandboxes))
	for id := range d.sandboxes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// Resize implements driver.Resizer: it records res as the sandbox's
// limits (see Limits).
func (d *Driver) Resize(ctx context.Context, id string, res sandbox.Resources) (err error) {
	defer func() { d.record(Call{Op: "resize", ID: id, Err: err}) }()
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.sandboxes[id]
	if !ok {
		return notFound(id)
	}
	b.limits = res
	return nil
}

// Limits returns the host limits of sandbox id: its spec's resources at
// start or restore, the last Resize's after one.
func (d *Driver) Limits(id string) (sandbox.Resources, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.sandboxes[id]
	if !ok {
		return sandbox.Resources{}, false
	}
	return b.limits, true
}

// Freeze implements driver.Freezer.
func (d *Driver) Freeze(ctx context.Context, id string) (err error) {
	defer func() { d.record(Call{Op: "freeze", ID: id, Err: err}) }()
	return d.setFrozen(id, true)
}

// Thaw implements driver.Freezer.
func (d *Driver) Thaw(ctx context.Context, id string) (err error) {
	defer func() { d.record(Call{Op: "thaw", ID: id, Err: err}) }()
	return d.setFrozen(id, false)
}

func (d *Driver) setFrozen(id string, frozen bool) error {
	if !d.Capabilities().Freeze {
		return fmt.Errorf("sandbox %q: freeze: %w", id, errdefs.ErrUnsupported)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.sandboxes[id]
	if !ok {
		return notFound(id)
	}
	from, to, scriptErr := driver.StateRunning, driver.StateFrozen, b.beh.FreezeErr
	if !frozen {
		from, to, scriptErr = driver.StateFrozen, driver.StateRunning, b.beh.ThawErr
	}
	if scriptErr != nil {
		return fmt.Errorf("sandbox %q: %w", id, scriptErr)
	}
	if b.state == to {
		return nil
	}
	if b.state != from {
		return fmt.Errorf("sandbox %q is %s: %w", id, b.state, errdefs.ErrConflict)
	}
	b.state = to
	return nil
}

// Checkpoint implements driver.Checkpointer. It writes CheckpointFile into
// dir (created if missing).
func (d *Driver) Checkpoint(ctx context.Context, id string, dir string, opts driver.CheckpointOptions) (err error) {
	defer func() { d.record(Call{Op: "checkpoint", ID: id, Dir: dir, Err: err}) }()
	if !d.Capabilities().MemoryCheckpoint {
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, errdefs.ErrUnsupported)
	}
	d.mu.Lock()
	b, ok := d.sandboxes[id]
	if !ok {
		d.mu.Unlock()
		return notFound(id)
	}
	if b.beh.CheckpointErr != nil {
		d.mu.Unlock()
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, b.beh.CheckpointErr)
	}
	if b.state != driver.StateRunning && b.state != driver.StateFrozen {
		st := b.state
		d.mu.Unlock()
		return fmt.Errorf("sandbox %q is %s: %w", id, st, errdefs.ErrConflict)
	}
	img := image{ID: id, Execs: b.execs, Counter: b.counter}
	d.mu.Unlock()

	data, err := json.Marshal(img)
	if err != nil {
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint dir: %w", id, err)
	}
	if err := os.WriteFile(filepath.Join(dir, CheckpointFile), data, 0o600); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint: %w", id, err)
	}
	if !opts.LeaveRunning {
		d.mu.Lock()
		d.stopLocked(b, driver.Exit{Code: 0})
		d.mu.Unlock()
	}
	return nil
}

// Restore implements driver.Checkpointer: it reads the image in dir and
// starts spec.ID with the checkpointed memory (Counter).
func (d *Driver) Restore(ctx context.Context, spec driver.Spec, dir string) (err error) {
	defer func() { d.record(Call{Op: "restore", ID: spec.ID, Dir: dir, Err: err}) }()
	if !d.Capabilities().MemoryCheckpoint {
		return fmt.Errorf("sandbox %q: restore: %w", spec.ID, errdefs.ErrUnsupported)
	}
	data, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
	if err != nil {
		if os.IsNotExist(err) {
			return fmt.Errorf("sandbox %q: checkpoint image in %s: %w", spec.ID, dir, errdefs.ErrNotFound)
		}
		return fmt.Errorf("sandbox %q: restore: %w", spec.ID, err)
	}
	var img image
	if err := json.Unmarshal(data, &img); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint image in %s: %v: %w", spec.ID, dir, err, errdefs.ErrInvalid)
	}
	return d.create(ctx, spec, &img, dir)
}
