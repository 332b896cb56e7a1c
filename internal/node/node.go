// Package node is the node agent: it runs the sandboxes of one machine.
//
// The control plane talks to a node through nodeapi.Service, in process
// (this agent) in all-in-one mode or over the node RPC API otherwise. The
// node owns the machine's network slots, cgroups, root filesystems,
// snapshots and runtime driver; it persists one versioned state record per
// sandbox so that a restarted agent recovers running and paused sandboxes
// and reclaims leaked host objects.
//
// # Ownership
//
// Each sandbox is a handle (handle.go), after nomad's task handle: it owns
// the sandbox's state (its record with identity, epoch, lifecycle state,
// execution and host objects; its cgroup, backstop and exit watcher; the
// host objects it keeps while paused; its watchdog and metrics state) and
// the locks over it, and the operations on one sandbox are its methods.
// The Agent holds a map of handles and only what is node-wide: the warm
// pools (pool_set.go, with their own lock), the leak reclaim, the event
// watchers (events.go), the kill journal (kills.go), the spawner threads.
//
// # Locks
//
// In the order they are taken: a goroutine that holds one takes only
// locks further down the list.
//
//  1. handle.op, one sandbox's operation lock, held for the whole of an
//     operation that changes its host objects. No code holds two, except a
//     fork: it takes its copies' (new handles, locked before they join the
//     map, so no one else waits on them) and then its source's.
//  2. Agent.reclaimMu, held for reading while host objects are made and for
//     writing by the periodic reclaim.
//  3. spawner.mu, held for reading around one driver call on a spawner
//     thread.
//  4. handle.files, ordering the writes and the removal of one sandbox's
//     directory; warmPools.saveMu, ordering the writes of pools.json.
//  5. Agent.mu, the map of handles and the closed and draining flags.
//  6. warmPools.mu, the pools and the reserved members.
//  7. handle.mu, one handle's state. It is held only to read or change
//     that state, never across a call to the driver, a host piece, envd or
//     the disk, and two are never held at once.
//  8. Leaves, under which nothing is taken: events.mu, killJournal.mu,
//     reclaimCounts.mu, and the volume manager's (Config.Volumes), which
//     Agent.forget calls under Agent.mu.
//
// Every lock is released by a defer in the function that took it
// (TestLocksReleasedByDefer holds the package to it): no lock is handed to
// a goroutine or released in a closure. Work that goes on after an
// operation has answered takes its own locks: the preparation of a paused
// sandbox's kept host objects (keep.go) runs in its own goroutine once the
// pause has released op, and its handle holds a channel, set by the pause
// under op and closed when the preparation ends, that every operation
// waits on once it holds op. A timer's work (backstop, keep bound) takes
// op itself.
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
