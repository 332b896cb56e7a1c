package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// v1Controllers are the hierarchies in which the v1 manager creates every
// sandbox cgroup. Runtimes may create the same path in further hierarchies
// (cpuset, devices, blkio, name=systemd, the unified tree); KillAll removes
// those too.
var v1Controllers = []string{"memory", "cpu", "cpuacct", "pids", "freezer"}

type v1Manager struct {
	layout layout
	root   string
	log    *slog.Logger
}

var _ Manager = (*v1Manager)(nil)

func newV1(l layout, root string, log *slog.Logger) (*v1Manager, error) {
	for _, c := range v1Controllers {
		if _, ok := l.v1[c]; !ok {
			return nil, fmt.Errorf("cgroup v1: controller %q is not mounted: %w", c, errdefs.ErrUnavailable)
		}
	}
	return &v1Manager{layout: l, root: root, log: log}, nil
}

func (m *v1Manager) dir(ctrl, name string) string {
	return filepath.Join(m.layout.v1[ctrl], m.root, name)
}

// ownDirs are the distinct directories of cgroup name in the hierarchies the
// manager creates it in.
func (m *v1Manager) ownDirs(name string) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range v1Controllers {
		d := m.dir(c, name)
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// allDirs are the directories of cgroup name in every mounted hierarchy,
// the unified one included.
func (m *v1Manager) allDirs(name string) []string {
	var out []string
	for _, mp := range m.layout.mountPoints() {
		out = append(out, filepath.Join(mp, m.root, name))
	}
	if m.layout.unified != "" {
		out = append(out, filepath.Join(m.layout.unified, m.root, name))
	}
	return out
}

func (m *v1Manager) Path(name string) string { return cgroupPath(m.root, name) }

func (m *v1Manager) Create(ctx context.Context, name string, res sandbox.Resources) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := validResources(name, res); err != nil {
		return nil, err
	}
	if exists(m.dir("memory", name)) {
		return nil, fmt.Errorf("cgroup %q: %w", name, errdefs.ErrAlreadyExists)
	}
	c := &v1Cgroup{m: m, name: name}
	for _, d := range m.ownDirs(name) {
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			_ = c.remove(ctx)
			return nil, fmt.Errorf("cgroup %q: %w", name, errors.Join(errdefs.ErrUnavailable, err))
		}
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			_ = c.remove(ctx)
			return nil, fmt.Errorf("cgroup %q: %w", name, errors.Join(errdefs.ErrUnavailable, err))
		}
	}
	if err := c.Update(ctx, res); err != nil {
		_ = c.remove(ctx)
		return nil, err
	}
	return c, nil
}

func (m *v1Manager) Open(_ context.Context, name string) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	// Any hierarchy will do: a runtime may have left the cgroup behind in
	// only some of them, and KillAll must still be able to remove it.
	for _, d := range m.allDirs(name) {
		if exists(d) {
			return &v1Cgroup{m: m, name: name}, nil
		}
	}
	return nil, fmt.Errorf("cgroup %q: %w", name, errdefs.ErrNotFound)
}

// List returns the sandbox cgroups found in any hierarchy, so that a cgroup
// a runtime left behind in only some hierarchies is listed as well.
func (m *v1Manager) List(context.Context) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, d := range m.allDirs("") {
		names, err := listChildren(d)
		if err != nil {
			return nil, fmt.Errorf("cgroup list %s: %w", d, errors.Join(errdefs.ErrUnavailable, err))
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out, nil
}

type v1Cgroup struct {
	m    *v1Manager
	name string
}

var _ Cgroup = (*v1Cgroup)(nil)

func (c *v1Cgroup) Name() string { return c.name }

func (c *v1Cgroup) wrap(what string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cgroup %q: %s: %w", c.name, what, errors.Join(errdefs.ErrNotFound, err))
	}
	return fmt.Errorf("cgroup %q: %s: %w", c.name, what, errors.Join(errdefs.ErrUnavailable, err))
}

func (c *v1Cgroup) Update(_ context.Context, res sandbox.Resources) error {
	if err := validResources(c.name, res); err != nil {
		return err
	}
	cpu := c.m.dir("cpu", c.name)
	quota := "-1"
	if res.VCPUs > 0 {
		quota = strconv.Itoa(res.VCPUs * CPUPeriodMicros)
	}
	if err := writeFile(cpu, "cpu.cfs_period_us", strconv.Itoa(CPUPeriodMicros)); err != nil {
		return c.wrap("cpu period", err)
	}
	if err := writeFile(cpu, "cpu.cfs_quota_us", quota); err != nil {
		return c.wrap("cpu quota", err)
	}
	if err := c.setMemory(res.MemoryMB); err != nil {
		return c.wrap("memory limit", err)
	}
	pids := "max"
	if res.Pids > 0 {
		pids = strconv.FormatInt(res.Pids, 10)
	}
	if err := writeFile(c.m.dir("pids", c.name), "pids.max", pids); err != nil {
		return c.wrap("pids limit", err)
	}
	return nil
}

var _ CPUWeighter = (*v1Cgroup)(nil)

// SetCPUWeight implements CPUWeighter with cpu.shares (weight ×
// 1024/100, at least 2, the kernel's floor).
func (c *v1Cgroup) SetCPUWeight(_ context.Context, weight int) error {
	if weight < 1 || weight > 10000 {
		return fmt.Errorf("cgroup %q: cpu weight %d: %w", c.name, weight, errdefs.ErrInvalid)
	}
	if err := writeFile(c.m.dir("cpu", c.name), "cpu.shares", strconv.Itoa(max(2, weight*1024/DefaultCPUWeight))); err != nil {
		return c.wrap("cpu shares", err)
	}
	return nil
}

// setMemory sets memory.limit_in_bytes and, where swap accounting exists,
// memory.memsw.limit_in_bytes to the same value, in the order the kernel
// accepts (memsw may never be below the memory limit).
func (c *v1Cgroup) setMemory(mb int64) error {
	dir := c.m.dir("memory", c.name)
	val := "-1"
	limit := uint64(1<<63 - 1)
	if mb > 0 {
		limit = uint64(mb) << 20
		val = strconv.FormatUint(limit, 10)
	}
	const memsw = "memory.memsw.limit_in_bytes"
	if _, err := os.Stat(filepath.Join(dir, memsw)); err != nil {
		return writeFile(dir, "memory.limit_in_bytes", val)
	}
	cur, err := readUint(dir, memsw)
	if err != nil {
		return err
	}
	if limit > cur {
		if err := writeFile(dir, memsw, val); err != nil {
			return err
		}
		return writeFile(dir, "memory.limit_in_bytes", val)
	}
	if err := writeFile(dir, "memory.limit_in_bytes", val); err != nil {
		return err
	}
	return writeFile(dir, memsw, val)
}

func (c *v1Cgroup) Stats(context.Context) (Stats, error) {
	var s Stats
	var err error
	mem := c.m.dir("memory", c.name)
	if s.CPUUsageNanos, err = readUint(c.m.dir("cpuacct", c.name), "cpuacct.usage"); err != nil {
		return s, c.wrap("stats", err)
	}
	if s.MemoryBytes, err = readUint(mem, "memory.usage_in_bytes"); err != nil {
		return s, c.wrap("stats", err)
	}
	if s.MemoryPeakBytes, err = readUint(mem, "memory.max_usage_in_bytes"); err != nil {
		return s, c.wrap("stats", err)
	}
	if s.MemoryLimit, err = readUint(mem, "memory.limit_in_bytes"); err != nil {
		return s, c.wrap("stats", err)
	}
	if s.MemoryLimit >= 1<<62 { // the kernel's "unlimited"
		s.MemoryLimit = 0
	}
	if s.Pids, err = readUint(c.m.dir("pids", c.name), "pids.current"); err != nil {
		return s, c.wrap("stats", err)
	}
	return s, nil
}

func (c *v1Cgroup) Procs(context.Context) ([]int, error) {
	set := map[int]bool{}
	for _, d := range c.m.allDirs(c.name) {
		if err := procsTree(d, set); err != nil {
			return nil, c.wrap("procs", err)
		}
	}
	return sortedPids(set), nil
}

func (c *v1Cgroup) OOMKilled(context.Context) (bool, error) {
	kv, err := readKeyed(c.m.dir("memory", c.name), "memory.oom_control")
	if err != nil {
		return false, c.wrap("oom_control", err)
	}
	return kv["oom_kill"] > 0, nil
}

func (c *v1Cgroup) PidsLimitHit(context.Context) (bool, error) {
	kv, err := readKeyed(c.m.dir("pids", c.name), "pids.events")
	if err != nil {
		return false, c.wrap("pids.events", err)
	}
	return kv["max"] > 0, nil
}

// KillAll freezes the cgroup so that nothing can fork, sends SIGKILL to
// every task, thaws it so the tasks can die, and removes the cgroup from
// every hierarchy (including the ones a runtime added).
func (c *v1Cgroup) KillAll(ctx context.Context) error {
	start := time.Now()
	deadline := start.Add(killTimeout)
	freezer := c.m.dir("freezer", c.name)
	frozen := false
	if exists(freezer) {
		if err := writeFile(freezer, "freezer.state", "FROZEN"); err == nil {
			frozen = true
			// Freezing is asynchronous; wait a bounded time for it.
			for i := 0; i < 200; i++ {
				if s, err := readString(freezer, "freezer.state"); err != nil || s == "FROZEN" {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	for round := 0; ; round++ {
		set := map[int]bool{}
		for _, d := range c.m.allDirs(c.name) {
			_ = procsTree(d, set)
		}
		if len(set) == 0 {
			break
		}
		killPids(set)
		if frozen {
			_ = writeFile(freezer, "freezer.state", "THAWED")
			frozen = false
		}
		if time.Now().After(deadline) {
			return c.wrap("kill", fmt.Errorf("%d tasks still present after %s", len(set), killTimeout))
		}
		select {
		case <-ctx.Done():
			return c.wrap("kill", ctx.Err())
		case <-time.After(time.Duration(min(round+1, 20)) * time.Millisecond):
		}
	}
	if frozen {
		_ = writeFile(freezer, "freezer.state", "THAWED")
	}
	if err := c.remove(ctx); err != nil {
		return err
	}
	c.m.log.Debug("cgroup removed", "cgroup", c.name, "took", time.Since(start))
	return nil
}

// remove deletes the cgroup's directory in every hierarchy.
func (c *v1Cgroup) remove(ctx context.Context) error {
	deadline := time.Now().Add(killTimeout)
	var errs []error
	for _, d := range c.m.allDirs(c.name) {
		if err := rmdirTree(ctx, d, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return c.wrap("remove", errors.Join(errs...))
	}
	return nil
}
