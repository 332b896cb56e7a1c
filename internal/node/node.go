// Package node is the node agent: it runs the sandboxes of one machine.
//
// The control plane talks to a node through nodeapi.Service, in process
// (this agent) in all-in-one mode or over the node RPC API otherwise. The
// node owns the machine's network slots, cgroups, root filesystems,
// snapshots and runtime driver; it persists one versioned state record per
// sandbox so that a restarted agent recovers running and paused sandboxes
// and reclaims leaked host objects.
package node

import "github.com/warren-sandbox/warren/internal/nodeapi"

// The node contract lives in internal/nodeapi, so that the control plane
// links none of the agent. These aliases keep the agent's own code and its
// composition root (internal/app) reading as before; new code outside this
// package names nodeapi.
type (
	Service         = nodeapi.Service
	Template        = nodeapi.Template
	CreateRequest   = nodeapi.CreateRequest
	PauseRequest    = nodeapi.PauseRequest
	ResumeRequest   = nodeapi.ResumeRequest
	ForkRequest     = nodeapi.ForkRequest
	Sandbox         = nodeapi.Sandbox
	Health          = nodeapi.Health
	Stats           = nodeapi.Stats
	EventType       = nodeapi.EventType
	Event           = nodeapi.Event
	ExecutionKiller = nodeapi.ExecutionKiller
	Capabilities    = nodeapi.Capabilities
	Pooler          = nodeapi.Pooler
	PoolStatus      = nodeapi.PoolStatus
	MetricsSource   = nodeapi.MetricsSource
	TemplateUse     = nodeapi.TemplateUse
)

// The optional parts of nodeapi.Service the agent implements; the node RPC
// (noderpc, nodeclient) carries each of them.
var (
	_ nodeapi.Pooler              = (*Agent)(nil)
	_ nodeapi.MetricsSource       = (*Agent)(nil)
	_ nodeapi.ExecutionKiller     = (*Agent)(nil)
	_ nodeapi.TemplateHolder      = (*Agent)(nil)
	_ nodeapi.SandboxSnapshotter  = (*Agent)(nil)
	_ nodeapi.TemplateSnapshotter = (*Agent)(nil)
)

// Health values and event types (see nodeapi).
const (
	HealthUnknown   = nodeapi.HealthUnknown
	HealthHealthy   = nodeapi.HealthHealthy
	HealthUnhealthy = nodeapi.HealthUnhealthy
	EventExited     = nodeapi.EventExited
	EventKilled     = nodeapi.EventKilled
)
