package node

import (
	"context"
	"io"
	"time"
)

// Layers makes and keeps the per-sandbox root filesystems: the template's
// shared read-only tree below a size-limited writable layer of the sandbox's
// own. The agent owns the lifecycle; an implementation (internal/rootfs, or a
// fake in tests) owns the host objects (image files, loop devices, mounts).
//
//	Create / CreateFrom ──▶ mounted ──Unmount──▶ image only ──Mount──▶ mounted
//	   any state ──Destroy──▶ (none)
//
// Saved layers (Save, CreateFrom, DeleteSaved) are the disks of template
// snapshots; they belong to no sandbox and no leak reclaim removes them.
type Layers interface {
	// Create makes sandbox id's writable layer of sizeMB over the read-only
	// tree lower, mounts the merged root and returns its directory.
	Create(ctx context.Context, id, lower string, sizeMB int64) (root string, err error)
	// Mount mounts an existing layer of id again (after Unmount) over lower
	// and returns the merged root directory.
	Mount(ctx context.Context, id, lower string) (root string, err error)
	// Unmount unmounts id's merged root and its layer, keeping the layer's
	// contents for a later Mount. Unmounting twice is not an error.
	Unmount(ctx context.Context, id string) error
	// Copy makes layer dst a copy of layer src (src may be mounted and in
	// use); dst is left unmounted.
	Copy(ctx context.Context, src, dst string) error
	// Destroy unmounts and deletes everything of id's layer. Missing is not
	// an error.
	Destroy(ctx context.Context, id string) error
	// Save copies sandbox id's layer into the saved layer name (the disk
	// of a template snapshot), left unmounted.
	Save(ctx context.Context, id, name string) error
	// CreateFrom makes sandbox id's layer a copy of saved layer name,
	// mounts it over lower and returns the merged root directory.
	CreateFrom(ctx context.Context, id, name, lower string) (root string, err error)
	// DeleteSaved deletes saved layer name. Missing is not an error.
	DeleteSaved(ctx context.Context, name string) error
	// Usage reports the bytes used and the size of id's writable layer.
	Usage(ctx context.Context, id string) (used, total uint64, err error)
	// ReclaimLeaked deletes layer objects of sandboxes Warren does not know:
	// mounts (and loop devices) of sandboxes not in mounted, and layer
	// images of sandboxes not in known. It returns how many objects of each
	// kind ("mount", "loop_device", "layer") it deleted.
	ReclaimLeaked(ctx context.Context, mounted, known map[string]bool) (map[string]int, error)
}

// LayerPorter is what Layers may do besides, for a template snapshot to
// travel to another node (node.Agent.ImportSnapshot): write a mounted
// layer's changes as an OCI layer tar, and make a saved layer by applying
// one over a lower tree. keep tells which extended attributes travel (an
// unpack refuses the others).
type LayerPorter interface {
	ExportLayer(ctx context.Context, id string, w io.Writer, keep func(name string) bool) error
	ImportSaved(ctx context.Context, name, lower string, sizeMB int64, r io.Reader, keep func(name string) bool) error
}

// Envd is how the agent talks to the envd inside a sandbox at addr
// (host:port). The default speaks HTTP (see NewHTTPEnvd).
type Envd interface {
	// WaitHealthy returns once envd's /health answers 204, or ctx ends.
	WaitHealthy(ctx context.Context, addr string) error
	// Init calls envd's /init with the sandbox's init token.
	Init(ctx context.Context, addr, initToken string, req EnvdInit) error
	// Start starts a process through envd's process service and returns
	// once it has started (it keeps running).
	Start(ctx context.Context, addr, accessToken string, p EnvdProcess) error
	// Run runs a process through envd and returns its exit code.
	Run(ctx context.Context, addr, accessToken string, p EnvdProcess) (int, error)
}

// EnvdInit is the body of envd's /init.
type EnvdInit struct {
	EnvVars        map[string]string `json:"envVars,omitempty"`
	AccessToken    string            `json:"accessToken,omitempty"`
	DefaultUser    string            `json:"defaultUser,omitempty"`
	DefaultWorkdir string            `json:"defaultWorkdir,omitempty"`
	Timestamp      time.Time         `json:"timestamp"`
	// TasksLimit is the most tasks per user inside the sandbox
	// (Resources.Pids): envd makes fork fail with EAGAIN beyond it.
	TasksLimit int64 `json:"tasksLimit,omitempty"`
}

// EnvdProcess is a process to start through envd.
type EnvdProcess struct {
	Tag  string
	Cmd  string
	Args []string
	Envs map[string]string
	Cwd  string
	User string
}

// Clock is the agent's time source, replaceable in tests. The default is the
// real clock (which testing/synctest fakes inside a bubble).
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a stoppable one-shot timer.
type Timer interface {
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(d, f)
}
