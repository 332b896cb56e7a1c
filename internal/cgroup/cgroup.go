// Package cgroup manages the host cgroups of sandboxes on cgroup v1
// (per-controller hierarchies: memory, cpu, cpuacct, pids, freezer) and v2
// (unified) hosts, with a no-op manager where cgroups are unavailable.
//
// Every sandbox gets one cgroup named "sbx-<id>" under the manager's root
// (default "warren"), so that leaked cgroups can be listed and destroyed.
package cgroup

import (
	"context"

	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Manager creates and finds sandbox cgroups under one root.
type Manager interface {
	// Create makes the cgroup "name" under the root with the given limits.
	// errdefs.ErrAlreadyExists if it exists.
	Create(ctx context.Context, name string, res sandbox.Resources) (Cgroup, error)
	// Open returns an existing cgroup; errdefs.ErrNotFound if missing.
	Open(ctx context.Context, name string) (Cgroup, error)
	// List returns the names of the "sbx-*" children of the root.
	List(ctx context.Context) ([]string, error)
	// Path returns the cgroup path (relative to the hierarchy root, leading
	// "/") that an OCI runtime's cgroupsPath should name for cgroup "name".
	Path(name string) string
}

// Cgroup is one sandbox's cgroup.
type Cgroup interface {
	Name() string
	// Update replaces the limits.
	Update(ctx context.Context, res sandbox.Resources) error
	// Stats reads the current usage.
	Stats(ctx context.Context) (Stats, error)
	// Procs lists the host PIDs in the cgroup.
	Procs(ctx context.Context) ([]int, error)
	// KillAll kills every process in the cgroup and removes it. Missing is
	// not an error.
	KillAll(ctx context.Context) error
	// OOMKilled reports whether the memory limit killed a process.
	OOMKilled(ctx context.Context) (bool, error)
	// PidsLimitHit reports whether the pids limit refused a fork (pids.events
	// max > 0).
	PidsLimitHit(ctx context.Context) (bool, error)
}

// CPUWeighter is implemented by cgroups whose CPU weight can be set: the
// share of CPU time the cgroup's processes get against its siblings' when
// the CPUs are busy (a quota still caps it).
type CPUWeighter interface {
	// SetCPUWeight sets the weight on cgroup v2's scale, 1 to 10000
	// (DefaultCPUWeight is the kernel's default; v1 cpu.shares are scaled).
	SetCPUWeight(ctx context.Context, weight int) error
}

// DefaultCPUWeight is the kernel's default CPU weight (v2 cpu.weight 100,
// v1 cpu.shares 1024).
const DefaultCPUWeight = 100

// Stats is a cgroup's resource usage.
type Stats struct {
	CPUUsageNanos   uint64 // cumulative CPU time
	MemoryBytes     uint64 // current memory use
	MemoryPeakBytes uint64 // highest memory use seen
	MemoryLimit     uint64
	Pids            uint64
}
