// Package nodeapi is the node contract: what the control plane asks of a
// node and the types that cross it. The node agent (internal/node)
// implements it in process; the node RPC client (internal/node/nodeclient)
// implements it over the wire; internal/lifecycle/fakenode is a fake of it.
// All three pass the one conformance suite in nodeapi/nodeapitest (the
// agent over the fake driver and, in internal/node/nodeinteg, over runsc).
//
// The package implements no Service: it holds the interfaces, the types
// that cross them and a few rules on those types (snapshot hosts, volume
// mounts, node kills). It imports only the standard library and the other
// contracts (internal/errdefs, internal/sandbox), so that the control
// plane (lifecycle, placement, apiserver, proxy) links no agent, driver,
// cgroup, network slot or envd code through it; deps_test.go checks both
// over the whole closure, third-party packages included.
//
// Errors carry the internal/errdefs classes (ErrNotFound, ErrConflict,
// ErrExhausted, ErrUnsupported, ErrInvalid); each wire maps them once.
package nodeapi

import (
	"context"
	"time"

	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Service is what the control plane asks of a node. Errors carry the
// errdefs classes: ErrNotFound for an unknown sandbox, ErrConflict for a
// wrong state, ErrExhausted for a refused pause or a full node,
// ErrUnsupported for a feature the node's driver lacks, ErrAlreadyExists
// for a sandbox ID the node holds already.
//
// A sandbox on a node (each arrow a call, or an event from Watch):
//
//	Create ──▶ running ──Pause──▶ paused ──Resume──▶ running (new execution)
//	running ──Fork──▶ running, and len(IDs) new running sandboxes
//	running, paused ──Kill──▶ gone (Get: ErrNotFound)
//	running ──init exits, limit, backstop──▶ gone, EventExited or EventKilled
//
// nodeapitest.Run checks every implementation against this.
type Service interface {
	// Create starts a new sandbox and returns once its envd answers.
	Create(ctx context.Context, req CreateRequest) (*Sandbox, error)
	// Get returns one sandbox the node runs or holds paused.
	Get(ctx context.Context, id string) (*Sandbox, error)
	// List returns every sandbox on the node.
	List(ctx context.Context) ([]*Sandbox, error)
	// SetEndTime re-arms the node's TTL backstop for the sandbox.
	SetEndTime(ctx context.Context, id string, endAt time.Time) error
	// UpdateNetwork replaces the sandbox's egress policy.
	UpdateNetwork(ctx context.Context, id string, policy sandbox.NetworkPolicy) error
	// Pause stops the sandbox, keeping its writable layer and, when
	// req.Memory is set, its memory. Every host object but the snapshot on
	// disk is released.
	Pause(ctx context.Context, id string, req PauseRequest) (*Sandbox, error)
	// Resume starts a paused sandbox again, as a new execution.
	Resume(ctx context.Context, id string, req ResumeRequest) (*Sandbox, error)
	// Fork makes len(req.IDs) new sandboxes from a running one, which keeps
	// running.
	Fork(ctx context.Context, id string, req ForkRequest) ([]*Sandbox, error)
	// Kill stops the sandbox and deletes everything it holds on the node,
	// its snapshot included.
	Kill(ctx context.Context, id string, reason sandbox.KillReason) error
	// Stats reads the sandbox's resource usage.
	Stats(ctx context.Context, id string) (*Stats, error)
	// Watch delivers events about sandboxes that change by themselves
	// (exit, oom, backstop) until ctx ends.
	Watch(ctx context.Context) (<-chan Event, error)
	// Capabilities tells what the node can do (from its driver).
	Capabilities(ctx context.Context) (Capabilities, error)
}

// Template is what a node needs to know of a template build to start
// sandboxes from it. Over a wire only ID and BuildID cross: the node
// resolves the rest, its paths above all, from its own catalog
// (docs/security.md, "Nothing that names a host path crosses a wire").
type Template struct {
	ID      string
	BuildID string
	// RootFS is the unpacked root filesystem on this node (read-only).
	RootFS string
	// Env is the template's environment (image ENV and build steps), applied
	// to every process (docs/lifecycle.md §7).
	Env map[string]string
	// User and Workdir are the default user and working directory of
	// processes started through envd.
	User    string
	Workdir string
	// StartCmd runs after boot, as the template's start command.
	StartCmd string
	// SnapshotDir, when set, is a memory image to restore instead of
	// booting (template snapshot on ready).
	SnapshotDir string
	// Resources are the template's own sizing (CPU and memory given at
	// its build, its disk); zero fields leave the server's defaults. The
	// control plane sizes sandboxes from it; a node uses only
	// CreateRequest.Resources.
	Resources sandbox.Resources
}

// CreateRequest asks a node to start a sandbox.
type CreateRequest struct {
	ID          string // chosen by the control plane
	ExecutionID string
	TeamID      string
	Template    Template
	Resources   sandbox.Resources
	EndAt       time.Time
	// Timeout, when positive, sets the end time to when the sandbox is
	// ready plus Timeout (on the node's clock) in place of EndAt, and the
	// answer's EndAt is that time: the TTL counts from ready and the
	// node's backstop (docs/lifecycle.md §2) is armed with it, so the
	// create needs no SetEndTime after it. A node that does not know the
	// field keeps EndAt and answers it.
	Timeout time.Duration
	Network sandbox.NetworkPolicy
	// EnvVars are the create-time environment; they override the template's.
	EnvVars map[string]string
	// EnvdAccessToken, when set, is required by envd on every request.
	EnvdAccessToken string
	Metadata        map[string]string
	// Volumes are mounted into the sandbox (VolumeMount; the node holds
	// each, of the sandbox's team), at every start and resume.
	Volumes []VolumeMount
}

// PauseRequest tunes Pause.
type PauseRequest struct {
	// Memory keeps the memory image (needs Capabilities.MemoryCheckpoint);
	// without it only the writable layer is kept.
	Memory bool
	// ExecutionID, when set, must name the sandbox's current execution;
	// a pause meant for an older one is ErrConflict.
	ExecutionID string
}

// ResumeRequest tunes Resume.
type ResumeRequest struct {
	ExecutionID string
	EndAt       time.Time
}

// ForkRequest asks for copies of a running sandbox.
type ForkRequest struct {
	IDs          []string // one new ID per copy
	ExecutionIDs []string
	EndAt        time.Time
	// EnvdAccessTokens, when given, holds each copy's own envd access
	// token ("" for none), one per ID, which its envd gets at /init: a
	// copy's token must not open its source or its siblings. Empty: the
	// copies keep the source's token (a control plane of an older
	// version).
	EnvdAccessTokens []string
}

// Sandbox is a node's view of one sandbox.
type Sandbox struct {
	ID          string
	ExecutionID string
	TemplateID  string
	BuildID     string
	TeamID      string
	State       sandbox.State
	// Epoch increments on every start, resume and pause.
	Epoch     int64
	StartedAt time.Time
	EndAt     time.Time
	Resources sandbox.Resources
	Network   sandbox.NetworkPolicy
	// Address is the host:port of the sandbox's envd as reachable from this
	// node; the sandbox's other ports are on the same host.
	Address string
	// Host is the address (no port) where any port of the sandbox is reached.
	Host             string
	EnvdVersion      string
	Metadata         map[string]string
	PausedWithMemory bool
	// Health is what the watchdog last saw of the sandbox's envd in its
	// current epoch (docs/lifecycle.md §5); unknown until the first probe,
	// and for a sandbox that is not running.
	Health Health
	// NodeProxy is the host:port of the proxy listener of the node that
	// runs the sandbox (`warren node --proxy-listen`, as advertised):
	// Address and Host are reachable from that node only, and the edge
	// proxy sends the sandbox's traffic there. Empty: the sandbox is on
	// the edge proxy's own host (the in-process agent of `warren serve`).
	NodeProxy string
}

// Health is a sandbox's health as the node's watchdog sees it.
type Health string

// Health values.
const (
	HealthUnknown   Health = "unknown"
	HealthHealthy   Health = "healthy"
	HealthUnhealthy Health = "unhealthy"
)

// Stats is a sandbox's resource usage.
type Stats struct {
	At              time.Time
	CPUCount        int
	CPUUsedPct      float64
	MemoryUsedBytes uint64
	MemoryTotal     uint64
	MemoryPeakBytes uint64
	DiskUsedBytes   uint64
	DiskTotalBytes  uint64
}

// EventType names what happened to a sandbox by itself.
type EventType string

// Event types delivered by Watch.
const (
	EventExited EventType = "exited" // init ended, or a limit killed it
	EventKilled EventType = "killed" // the node killed it (backstop, orphan)
)

// Event is a change the node reports without being asked.
type Event struct {
	Type        EventType
	SandboxID   string
	ExecutionID string
	Reason      sandbox.KillReason
	At          time.Time
}

// ExecutionKiller is implemented by nodes that can kill a sandbox only if
// it still runs the named execution: a kill meant for one incarnation never
// hits its resumed successor (ErrConflict instead).
type ExecutionKiller interface {
	KillExecution(ctx context.Context, id, executionID string, reason sandbox.KillReason) error
}

// Capabilities tells the control plane which optional features a node
// supports, so it can answer clearly when one is missing.
type Capabilities struct {
	Driver           string
	MemoryCheckpoint bool
	Freeze           bool
	Fork             bool
}
