// Package sandbox holds the small domain types that every Warren component
// shares: sandbox states, kill reasons, resource specifications and the
// network (egress) policy.
//
// It depends on nothing inside Warren but internal/egressrules (the
// name-based part of a network policy, standard library only), so the
// control plane, the node agent, the runtime drivers and the store can all
// speak of a sandbox the same way.
package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

// State is the lifecycle state of a sandbox.
//
//	starting ──▶ running ──▶ pausing ──▶ paused
//	               ▲                        │
//	               └──────── resume ────────┘
//	any state ──▶ killed
type State string

// The lifecycle states.
const (
	StateStarting State = "starting"
	StateRunning  State = "running"
	StatePausing  State = "pausing"
	StatePaused   State = "paused"
	StateKilled   State = "killed"
)

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	switch s {
	case StateStarting, StateRunning, StatePausing, StatePaused, StateKilled:
		return true
	}
	return false
}

// KillReason says why a sandbox was stopped. It appears on the killed event,
// the sandbox_killed_total metric and every log line of the kill path.
type KillReason string

// The kill reasons. The zero value reads as "unknown".
const (
	KillRequest         KillReason = "request"          // the user asked (DELETE)
	KillTimeout         KillReason = "timeout"          // TTL expired, no auto-pause
	KillAdmin           KillReason = "admin"            // an operator asked
	KillOrphaned        KillReason = "orphaned"         // running on a node, unknown to the control plane
	KillTTLBackstop     KillReason = "ttl_backstop"     // the node's backstop timer fired
	KillResumeFailed    KillReason = "resume_failed"    // a resume could not bring it back
	KillTemplateMissing KillReason = "template_missing" // its template is gone
	KillOOM             KillReason = "oom"              // its memory limit killed its init
	KillPidsLimit       KillReason = "pids_limit"       // its host pids limit refused the runtime a task
	KillNodeLost        KillReason = "node_lost"        // its node disappeared
	KillExited          KillReason = "exited"           // its init exited by itself
	KillVolumeDeleted   KillReason = "volume_deleted"   // a volume it mounts was destroyed with force
)

// Known reports whether r is one of the reasons above, or empty. A reason
// from a node's report or event that is not is recorded as empty: labels
// and stored rows only ever hold the fixed set.
func (r KillReason) Known() bool {
	switch r {
	case "", KillRequest, KillTimeout, KillAdmin, KillOrphaned, KillTTLBackstop, KillResumeFailed,
		KillTemplateMissing, KillOOM, KillPidsLimit, KillNodeLost, KillExited, KillVolumeDeleted:
		return true
	}
	return false
}

// String returns the reason, or "unknown" for the empty reason.
func (r KillReason) String() string {
	if r == "" {
		return "unknown"
	}
	return string(r)
}

// Resources are the limits of one sandbox.
type Resources struct {
	VCPUs    int   // CPU quota in whole CPUs
	MemoryMB int64 // memory limit
	DiskMB   int64 // size of the writable layer
	Pids     int64 // maximum number of tasks per user inside; 0 means the node's default
}

// TasksPerUser is the most tasks (processes and threads) one user may
// have inside the sandbox: Pids, but no more than one per MiB of memory
// (a guest process costs a gVisor sandbox's host about 0.7 MiB, so that a
// process flood runs out of tasks before the host memory limit fires).
// 0 means no limit (Pids and MemoryMB both 0).
func (r Resources) TasksPerUser() int64 {
	n := r.Pids
	if r.MemoryMB > 0 && (n == 0 || n > r.MemoryMB) {
		n = r.MemoryMB
	}
	return n
}

// NewID returns a new random sandbox ID: 20 lowercase alphanumeric
// characters, safe in host names, cgroup names and file names.
func NewID() string { return randomID(20) }

// NewExecutionID returns a new ID for one incarnation (create or resume) of a
// sandbox.
func NewExecutionID() string { return randomID(16) }

func randomID(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// ValidID reports whether id could be a sandbox ID: non-empty, at most 64
// characters of [a-z0-9-].
func ValidID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	return strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}

// HostName returns the prefix used for every host object of sandbox id
// (cgroups, network namespaces, state directories): "sbx-<id>".
func HostName(id string) string { return "sbx-" + id }

// RandomToken returns n random bytes as lowercase hex.
func RandomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}
