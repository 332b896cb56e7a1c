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

// The optional parts of nodeapi.Service the agent implements; the node RPC
// (noderpc, nodeclient) carries each of them. Sandbox snapshots
// (nodeapi.SandboxSnapshotter) are kept as builds of the node's template
// catalog: internal/nodebuild.SandboxSnapshots implements that part over
// the agent's SnapshotSandboxInto.
var (
	_ nodeapi.Pooler              = (*Agent)(nil)
	_ nodeapi.MetricsSource       = (*Agent)(nil)
	_ nodeapi.ExecutionKiller     = (*Agent)(nil)
	_ nodeapi.TemplateHolder      = (*Agent)(nil)
	_ nodeapi.TemplateSnapshotter = (*Agent)(nil)
	_ nodeapi.LogSource           = (*Agent)(nil)
)
