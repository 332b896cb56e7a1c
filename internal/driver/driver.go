// Package driver defines the runtime driver: the part of the node agent that
// turns a prepared sandbox (root filesystem, network namespace, cgroup) into
// running processes, and pauses, checkpoints, restores and stops them.
//
// Implementations live in subpackages (fake, runsc, runc) and all pass the
// conformance suite in drivertest.
//
// Lifecycle of one sandbox inside a driver:
//
//	          Start / Restore
//	(none) ───────────────────▶ running ◀──── Thaw ────┐
//	                             │  │                  │
//	                             │  └──── Freeze ──▶ frozen
//	                             │
//	      Checkpoint(leave=false)│ init exits / Kill
//	                             ▼
//	                          stopped ──── Delete ───▶ (none)
//
// Checkpoint with LeaveRunning keeps the sandbox running (fork, template
// snapshot). Checkpoint without it leaves the sandbox stopped with its memory
// image on disk; Restore starts a new sandbox (any ID) from that image.
// Delete releases everything the driver holds for the sandbox and is safe to
// call in any state, more than once.
//
// The driver does not create network namespaces, cgroups or root
// filesystems: the node agent prepares those and names them in the Spec.
package driver

import (
	"context"
	"io"
	"time"

	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Driver runs sandboxes on one host. All methods are safe for concurrent use
// on different sandboxes.
type Driver interface {
	// Name is the driver's name as used in configuration: "runsc", "runc", "fake".
	Name() string
	// Capabilities says which optional features this driver supports.
	Capabilities() Capabilities
	// Start creates the sandbox described by spec and starts its init
	// process. It returns once init is running.
	Start(ctx context.Context, spec Spec) error
	// Exec runs a process inside a running sandbox and waits for it.
	Exec(ctx context.Context, id string, p Process) (exitCode int, err error)
	// Wait blocks until the sandbox's init exits (or ctx ends) and reports how.
	Wait(ctx context.Context, id string) (Exit, error)
	// Kill sends SIGKILL to every process of the sandbox. The sandbox is
	// stopped afterwards; Delete removes it.
	Kill(ctx context.Context, id string) error
	// Delete removes the sandbox and all runtime state (bundle, runtime
	// records, mounts the driver made). Missing sandboxes are not an error.
	Delete(ctx context.Context, id string) error
	// Status reports the current state of a sandbox; errdefs.ErrNotFound if
	// the driver knows no such sandbox.
	Status(ctx context.Context, id string) (Status, error)
	// List returns the IDs of every sandbox the runtime knows, including ones
	// left over from an earlier run of the node agent (for recovery and leak
	// reclaim).
	List(ctx context.Context) ([]string, error)
}

// Freezer is implemented by drivers that can stop every process of a sandbox
// in place, keeping its memory resident (cgroup freezer, runsc pause).
type Freezer interface {
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
}

// Resizer is implemented by drivers that keep host limits of their own
// above the sandbox's cgroup (runsc: the host wall above the guest's
// limits). The node calls Resize after it changed the limits of running
// sandbox id's cgroup to res, so that the driver sets its own again as a
// Start with res would have. What the guest saw at boot (CPU count,
// memory size, the size of /tmp) does not change.
type Resizer interface {
	Resize(ctx context.Context, id string, res sandbox.Resources) error
}

// Checkpointer is implemented by drivers that can save a sandbox's memory to
// disk and restore it later, possibly as several new sandboxes (fork).
type Checkpointer interface {
	// Checkpoint writes the memory image of sandbox id into dir. Without
	// LeaveRunning the sandbox is stopped afterwards.
	Checkpoint(ctx context.Context, id string, dir string, opts CheckpointOptions) error
	// Restore starts a new sandbox described by spec from the image in dir.
	// spec.ID may differ from the checkpointed sandbox's ID.
	Restore(ctx context.Context, spec Spec, dir string) error
}

// RestorePreparer is implemented by Checkpointers that can make a
// sandbox's runtime container ahead of its restore (runsc: `runsc create`),
// so that a restore later only loads the memory image into it. The node
// uses it to keep a recently paused sandbox ready to resume.
//
//	PrepareRestore ──▶ created ──RestorePrepared──▶ running
//	                      └───────── Delete ──────▶ (none)
type RestorePreparer interface {
	// PrepareRestore creates sandbox spec.ID without starting anything
	// in it; spec must be equivalent to the checkpointed sandbox's (see
	// the driver's doc of Restore). The created sandbox holds its cgroup's
	// share of memory (runsc: about 15 MB) until RestorePrepared or Delete.
	PrepareRestore(ctx context.Context, spec Spec) error
	// RestorePrepared restores the image in dir into sandbox id, made by
	// PrepareRestore; errdefs.ErrNotFound when id was not prepared. After
	// a failure the sandbox is left for Delete.
	RestorePrepared(ctx context.Context, id, dir string) error
}

// Capabilities describes what a driver supports beyond the core interface.
type Capabilities struct {
	Freeze           bool // implements Freezer
	MemoryCheckpoint bool // implements Checkpointer: pause with memory, fork, template snapshots
	StrongIsolation  bool // a kernel between the sandbox and the host (gVisor, microVM)
	DiskLimit        bool // enforces Spec.Resources.DiskMB
}

// Spec describes one sandbox to start or restore.
type Spec struct {
	ID        string // sandbox ID; host objects are named sandbox.HostName(ID)
	BundleDir string // a directory owned by this sandbox for the driver's files (OCI bundle)

	// RootFS is the sandbox's root filesystem, prepared by the node agent:
	// an overlay of the template's shared read-only tree and the sandbox's
	// own writable layer (size-limited where the node can).
	RootFS string

	Hostname   string
	Hosts      string // contents of /etc/hosts
	ResolvConf string // contents of /etc/resolv.conf

	// NetNSPath is the network namespace to join (prepared by the node
	// agent); empty means no network at all.
	NetNSPath string
	// CgroupParent is the cgroup path under which the driver places the
	// sandbox, e.g. "/warren/sbx-<id>".
	CgroupParent string
	Resources    sandbox.Resources
	// GuestMemoryMB is the memory the guest was first booted with, when it
	// differs from Resources.MemoryMB (a warm pool member claimed with more
	// memory): what is sized from it at boot (the /tmp tmpfs) keeps that
	// size, so that a memory image restores onto the mounts it was taken
	// with. 0 means Resources.MemoryMB.
	GuestMemoryMB int64

	// Init is the sandbox's first process (envd). Its binary and any other
	// read-only host files are made visible through Mounts.
	Init   Process
	Mounts []Mount

	// Log receives the runtime's own diagnostic output and the init's
	// stdout and stderr; may be nil. An *os.File is handed to the runtime
	// as is (open it with O_APPEND: gVisor writes at its own offsets);
	// any other writer is fed through a pipe for as long as the sandbox runs.
	Log io.Writer
}

// Process is a process to run inside a sandbox.
type Process struct {
	Args   []string
	Env    []string // KEY=VALUE
	Cwd    string
	User   string // "uid:gid" or empty for root
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Mount is a host path bound into a sandbox.
type Mount struct {
	Source      string
	Destination string
	ReadOnly    bool
	Type        string   // "bind" (default) or "tmpfs"
	Options     []string // extra mount options, e.g. "size=64m" for tmpfs
}

// CheckpointOptions tune Checkpoint.
type CheckpointOptions struct {
	// LeaveRunning keeps the sandbox running after the image is written.
	LeaveRunning bool
}

// State is a driver-level sandbox state.
type State string

// Driver-level states.
const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateFrozen  State = "frozen"
	StateStopped State = "stopped"
)

// Status is the observed state of one sandbox.
type Status struct {
	ID      string
	State   State
	InitPID int // host PID of the init (or of the sandbox process), 0 if none
}

// Exit says how a sandbox's init ended.
type Exit struct {
	Code     int  // exit code, or 128+signal; -1 when the runtime could not tell (see the driver's doc)
	OOM      bool // killed by its memory limit
	Signaled bool
	At       time.Time
}
