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
// running sandboxes (E2B's POST /sandboxes/{id}/snapshots). No path
// crosses it: the node keeps the snapshot as build req.BuildID of its
// template catalog, which resolves the creates that name that build (the
// node that took it restores it; another pulls it from there as it pulls
// a template build, checked against the digests the control plane
// recorded). The node agent and the RPC client implement it (the agent's
// through the node's catalog: internal/nodebuild.SandboxSnapshots).
type SandboxSnapshotter interface {
	// SnapshotSandbox checkpoints running sandbox id (of team
	// req.TeamID) as build req.BuildID of template req.TemplateID,
	// leaving it running, and returns what the control plane records of
	// that build. A node that cannot checkpoint memory gives
	// ErrUnsupported; a sandbox that is not running ErrConflict; one of
	// another team, or none, ErrNotFound; a build ID the node holds
	// already ErrAlreadyExists.
	SnapshotSandbox(ctx context.Context, id string, req SnapshotRequest) (*SandboxSnapshot, error)
	// DeleteSandboxSnapshot deletes the sandbox snapshot the node took as
	// build buildID (a snapshot the control plane failed to record);
	// ErrNotFound when the node took none as that build. A snapshot the
	// control plane recorded goes as template builds go: with its
	// template, through the node's template collector.
	DeleteSandboxSnapshot(ctx context.Context, buildID string) error
}

// SnapshotRequest names the build a sandbox snapshot becomes: a new build
// of the control plane's catalog, made for the snapshot (waiting for its
// outcome there).
type SnapshotRequest struct {
	TeamID     string
	TemplateID string
	BuildID    string
}

// Artifact identifies a build's artifact as nodes exchange it: a tar of
// Size bytes whose sha256 (hex) is SHA256.
type Artifact struct {
	SHA256 string
	Size   int64
}

// SandboxSnapshot is what a node reports of a sandbox snapshot it took:
// the control plane records it as the snapshot build's, and a node that
// pulls the build checks the artifacts against it.
type SandboxSnapshot struct {
	// Source is the template the sandbox was started from (its ID and
	// build, environment, user, working directory, start command and
	// resources); no path: RootFS and SnapshotDir are empty.
	Source Template
	// RootFS is the artifact of the root filesystem the snapshot's layer
	// lies over; Snapshot the artifact of the snapshot (memory image,
	// description, layer changes), Host what it was taken with. A zero
	// Snapshot (nil Host) is a snapshot that stays on its node (its
	// runtime or layers do not carry snapshots elsewhere): only that node
	// restores it.
	RootFS   Artifact
	Snapshot Artifact
	Host     *SnapshotHost
}

// Travels reports whether the snapshot can be restored on another node.
func (s *SandboxSnapshot) Travels() bool {
	return s != nil && s.Host != nil && s.Snapshot.SHA256 != "" && s.RootFS.SHA256 != ""
}

// LogSource is the optional part of Service that serves the log a running
// sandbox keeps (its envd's lines and its start command's output): the
// node reads it from the sandbox, so the control plane never dials a
// sandbox's address. Agent implements it.
type LogSource interface {
	// SandboxLogs returns running sandbox id's kept log from start on
	// (zero: all of it), oldest first. An unknown sandbox is ErrNotFound,
	// one that is not running ErrConflict.
	SandboxLogs(ctx context.Context, id string, start time.Time) ([]LogEntry, error)
}

// LogEntry is one line of a sandbox's kept log.
type LogEntry struct {
	Timestamp time.Time
	Level     string
	Message   string
	Fields    map[string]string
}

// TemplateSnapshotter is the optional part of Service for template
// snapshots on ready (a build's "ready command"). Agent implements it;
// unlike SandboxSnapshotter it names directories on the node and is in
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

// Drainer is the optional part of Service that hears whether the control
// plane drains the node (its heartbeat's reply says so). A draining node
// takes no placements, resumes included, so its paused sandboxes will not
// resume there while it drains: what it keeps for their resume is given
// back. Agent implements it; it does not cross the node RPC.
type Drainer interface {
	// SetDraining says whether the node drains now; it is called with
	// every heartbeat's reply and must not block.
	SetDraining(draining bool)
}

// EgressLogger is the optional part of Service that serves what a
// sandbox tried to reach through the node's egress proxy (sandboxes
// whose network rules name hosts). Agent implements it.
type EgressLogger interface {
	// EgressLog returns sandbox id's egress log, oldest first, its open
	// connections last (empty for a sandbox never behind the proxy). An
	// unknown sandbox is ErrNotFound.
	EgressLog(ctx context.Context, id string) ([]EgressEntry, error)
}

// EgressEntry is one connection or DNS question of a sandbox's egress
// log.
type EgressEntry struct {
	Time     time.Time
	Proto    string // "tcp" or "dns"
	Host     string // the name it carried, if any
	Addr     string // the address dialled ("" for DNS)
	Port     int
	Allowed  bool
	Reason   string
	BytesOut int64
	BytesIn  int64
	Duration time.Duration
	Open     bool
}
