package cgroup

import (
	"context"
	"fmt"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// DefaultRoot is the name of the cgroup under which every sandbox cgroup is
// created, in every hierarchy.
const DefaultRoot = "warren"

// NamePrefix starts the name of every sandbox cgroup; List returns only the
// children of the root that carry it.
const NamePrefix = "sbx-"

// CPUPeriodMicros is the CFS period used for CPU quotas: VCPUs × this
// period is the quota.
const CPUPeriodMicros = 100000

// validName reports whether name is usable as a single cgroup directory name.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("cgroup name %q: %w", name, errdefs.ErrInvalid)
	}
	return nil
}

// validResources rejects negative limits.
func validResources(name string, res sandbox.Resources) error {
	if res.VCPUs < 0 || res.MemoryMB < 0 || res.Pids < 0 {
		return fmt.Errorf("cgroup %q: negative limit in %+v: %w", name, res, errdefs.ErrInvalid)
	}
	return nil
}

// cgroupPath is the path of cgroup name relative to a hierarchy's root.
func cgroupPath(root, name string) string {
	return "/" + strings.Trim(root, "/") + "/" + name
}

// Noop returns a manager that creates nothing and enforces nothing. Its
// cgroups report zero usage, no processes and no OOM kill; Path returns ""
// so that runtimes fall back to their own placement.
func Noop() Manager { return noopManager{} }

type noopManager struct{}

var _ Manager = noopManager{}

func (noopManager) Create(_ context.Context, name string, res sandbox.Resources) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := validResources(name, res); err != nil {
		return nil, err
	}
	return noopCgroup{name: name}, nil
}

func (noopManager) Open(_ context.Context, name string) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	return noopCgroup{name: name}, nil
}

func (noopManager) List(context.Context) ([]string, error) { return nil, nil }

func (noopManager) Path(string) string { return "" }

type noopCgroup struct{ name string }

var _ Cgroup = noopCgroup{}

func (c noopCgroup) Name() string                                  { return c.name }
func (noopCgroup) Update(context.Context, sandbox.Resources) error { return nil }
func (noopCgroup) Stats(context.Context) (Stats, error)            { return Stats{}, nil }
func (noopCgroup) Procs(context.Context) ([]int, error)            { return nil, nil }
func (noopCgroup) KillAll(context.Context) error                   { return nil }
func (noopCgroup) OOMKilled(context.Context) (bool, error)         { return false, nil }
func (noopCgroup) PidsLimitHit(context.Context) (bool, error)      { return false, nil }
