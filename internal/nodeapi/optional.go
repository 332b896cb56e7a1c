package nodeapi

import (
	"context"
	"time"

	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Optional parts of Service: a control plane finds them by type
// assertion on its Service and answers ErrUnsupported without them.

// Pooler is the optional part of Service for warm pools. Agent implements
// it.
type Pooler interface {
	// SetPool keeps size ready sandboxes of tmpl with res (zero fields take
	// the node's defaults); size 0 removes the pool.
	SetPool(ctx context.Context, tmpl Template, res sandbox.Resources, size int) error
	// Reserve takes a ready member of tmpl's pool that can become a
	// sandbox of resources res out of the pool and returns its ID, to be
	// passed to Create; false when none is ready (a miss). Whether a
	// member serves res is the implementation's (the agent's: the same
	// disk size, at least the member's memory, any CPUs and task limit).
	Reserve(tmpl Template, res sandbox.Resources) (string, bool)
	// Unreserve puts a reserved member that will not be claimed back into
	// its pool (or destroys it when the pool no longer wants it).
	Unreserve(id string)
	// Pools reports each pool by template ID.
	Pools() map[string]PoolStatus
}

// PoolStatus is one pool's state. Hits and Misses count the Reserve
// calls for the pool's template since the pool was set (a miss: none of
// its members was ready for that build and those resources).
type PoolStatus struct {
	BuildID string
	Size    int
	Ready   int
	Making  int
	Hits    int64
	Misses  int64
}

// MetricsSource is the optional part of Service that serves a sandbox's
// sampled metrics. Agent implements it.
type MetricsSource interface {
	// Metrics returns sandbox id's samples taken in [start, end], oldest
	// first; a zero bound is open. An unknown sandbox is ErrNotFound.
	Metrics(ctx context.Context, id string, start, end time.Time) ([]Stats, error)
}

// TemplateUse is one template build that a sandbox of the agent (or one of
// its warm pools) may still read: its root filesystem tree (the lower
// directory of a sandbox's overlay, needed again at every resume) and its
// snapshot directory (restored by creates and pool refills). The paths
// are the node's: over a wire they stay empty.
type TemplateUse struct {
	TemplateID  string
	BuildID     string
	RootFS      string
	SnapshotDir string
	// SandboxID is the sandbox that uses it; empty for a warm pool's
	// template.
	SandboxID string
}

// TemplateHolder is the optional part of Service that tells which template
// files the node's sandboxes and warm pools use (the template collector
// keeps them; placement prefers nodes that hold a template). Agent
// implements it.
type TemplateHolder interface {
	// TemplatesInUse returns every template build a sandbox of the node
	// (in any state, pool members and internal snapshot sandboxes
	// included) or a warm pool uses. It is a snapshot: a sandbox may start
	// using another build right after.
	TemplatesInUse(ctx context.Context) ([]TemplateUse, error)
}

// SandboxSnapshotter is the optional part of Service for snapshots of
// running sandboxes (E2B's POST /sandboxes/{id}/snapshots). Agent
// implements it. Dir is a directory on the node: the part is in process
// only, no wire carries it.
type SandboxSnapshotter interface {
	// SnapshotSandbox checkpoints running sandbox id into dir, leaving it
	// running, and returns the template the sandbox was started from; a
	// sandbox created with that template and SnapshotDir = dir restores
	// it. A node that cannot checkpoint memory gives ErrUnsupported.
	SnapshotSandbox(ctx context.Context, id, dir string) (Template, error)
	// DeleteSnapshot deletes the snapshot in dir with its saved layer.
	DeleteSnapshot(ctx context.Context, dir string) error
}

// TemplateSnapshotter is the optional part of Service for template
// snapshots on ready (a build's "ready command"). Agent implements it;
// like SandboxSnapshotter it names directories on the node and is in
// process only (the node's builder takes its snapshots itself).
type TemplateSnapshotter interface {
	// Snapshot starts a sandbox of t, waits until readyCmd exits 0 in it,
	// and checkpoints it into dir (a directory on the node); creates with
	// Template.SnapshotDir = dir then restore it. A node that cannot
	// checkpoint memory gives ErrUnsupported.
	Snapshot(ctx context.Context, t Template, readyCmd, dir string) error
	// DeleteSnapshot deletes the snapshot in dir with its saved layer.
	DeleteSnapshot(ctx context.Context, dir string) error
}
