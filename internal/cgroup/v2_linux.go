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
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// v2Controllers are enabled for the children of the root when the host's
// unified hierarchy offers them.
var v2Controllers = []string{"cpu", "memory", "pids"}

type v2Manager struct {
	mount string // cgroup2 mount point
	root  string
	log   *slog.Logger
}

var _ Manager = (*v2Manager)(nil)

func newV2(mount, root string, log *slog.Logger) *v2Manager {
	return &v2Manager{mount: mount, root: root, log: log}
}

func (m *v2Manager) dir(name string) string { return filepath.Join(m.mount, m.root, name) }

func (m *v2Manager) Path(name string) string { return cgroupPath(m.root, name) }

// enableControllers turns on the available controllers for the children of
// every level from the mount point down to the root.
func (m *v2Manager) enableControllers() error {
	avail, err := readString(m.mount, "cgroup.controllers")
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, c := range strings.Fields(avail) {
		have[c] = true
	}
	var enable []string
	for _, c := range v2Controllers {
		if have[c] {
			enable = append(enable, "+"+c)
		}
	}
	if len(enable) == 0 {
		return nil
	}
	dir := m.mount
	for _, part := range strings.Split(m.root, "/") {
		if err := writeFile(dir, "cgroup.subtree_control", strings.Join(enable, " ")); err != nil {
			return err
		}
		dir = filepath.Join(dir, part)
	}
	return writeFile(dir, "cgroup.subtree_control", strings.Join(enable, " "))
}

func (m *v2Manager) Create(ctx context.Context, name string, res sandbox.Resources) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := validResources(name, res); err != nil {
		return nil, err
	}
	d := m.dir(name)
	if exists(d) {
		return nil, fmt.Errorf("cgroup %q: %w", name, errdefs.ErrAlreadyExists)
	}
	if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
		return nil, fmt.Errorf("cgroup %q: %w", name, errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := m.enableControllers(); err != nil {
		return nil, fmt.Errorf("cgroup %q: enable controllers: %w", name, errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := os.Mkdir(d, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cgroup %q: %w", name, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("cgroup %q: %w", name, errors.Join(errdefs.ErrUnavailable, err))
	}
	c := &v2Cgroup{m: m, name: name}
	if err := c.Update(ctx, res); err != nil {
		_ = rmdirTree(ctx, d, time.Now().Add(killTimeout))
		return nil, err
	}
	return c, nil
}

func (m *v2Manager) Open(_ context.Context, name string) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if !exists(m.dir(name)) {
		return nil, fmt.Errorf("cgroup %q: %w", name, errdefs.ErrNotFound)
	}
	return &v2Cgroup{m: m, name: name}, nil
}

func (m *v2Manager) List(context.Context) ([]string, error) {
	names, err := listChildren(m.dir(""))
	if err != nil {
		return nil, fmt.Errorf("cgroup list: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	return names, nil
}

type v2Cgroup struct {
	m    *v2Manager
	name string
}

var _ Cgroup = (*v2Cgroup)(nil)

func (c *v2Cgroup) Name() string { return c.name }

func (c *v2Cgroup) wrap(what string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cgroup %q: %s: %w", c.name, what, errors.Join(errdefs.ErrNotFound, err))
	}
	return fmt.Errorf("cgroup %q: %s: %w", c.name, what, errors.Join(errdefs.ErrUnavailable, err))
}

// setLimit writes a limit. An unlimited value into a file the host lacks
// (its controller is not available) is skipped; a real limit is an error.
func (c *v2Cgroup) setLimit(file, value string, unlimited bool) error {
	d := c.m.dir(c.name)
	if _, err := os.Stat(filepath.Join(d, file)); errors.Is(err, fs.ErrNotExist) {
		if !exists(d) {
			return c.wrap(file, err)
		}
		if unlimited {
			return nil
		}
		return fmt.Errorf("cgroup %q: %s: controller unavailable on this host: %w", c.name, file, errdefs.ErrUnsupported)
	}
	if err := writeFile(d, file, value); err != nil {
		return c.wrap(file, err)
	}
	return nil
}

var _ CPUWeighter = (*v2Cgroup)(nil)

// SetCPUWeight implements CPUWeighter with cpu.weight; a host without the
// cpu controller in the unified tree has none to set (ErrUnsupported).
func (c *v2Cgroup) SetCPUWeight(_ context.Context, weight int) error {
	if weight < 1 || weight > 10000 {
		return fmt.Errorf("cgroup %q: cpu weight %d: %w", c.name, weight, errdefs.ErrInvalid)
	}
	return c.setLimit("cpu.weight", strconv.Itoa(weight), false)
}

func (c *v2Cgroup) Update(_ context.Context, res sandbox.Resources) error {
	if err := validResources(c.name, res); err != nil {
		return err
	}
	cpu := "max " + strconv.Itoa(CPUPeriodMicros)
	if res.VCPUs > 0 {
		cpu = strconv.Itoa(res.VCPUs*CPUPeriodMicros) + " " + strconv.Itoa(CPUPeriodMicros)
	}
	if err := c.setLimit("cpu.max", cpu, res.VCPUs == 0); err != nil {
		return err
	}
	mem := "max"
	if res.MemoryMB > 0 {
		mem = strconv.FormatInt(res.MemoryMB<<20, 10)
	}
	if err := c.setLimit("memory.max", mem, res.MemoryMB == 0); err != nil {
		return err
	}
	// No swap beyond the memory limit, as on v1 with memsw.
	if err := c.setLimit("memory.swap.max", "0", true); err != nil {
		return err
	}
	pids := "max"
	if res.Pids > 0 {
		pids = strconv.FormatInt(res.Pids, 10)
	}
	return c.setLimit("pids.max", pids, res.Pids == 0)
}

// optUint reads a number from a file that may be absent (controller not
// enabled on this host); absent reads as 0.
func optUint(dir, file string) (uint64, error) {
	v, err := readUint(dir, file)
	if errors.Is(err, fs.ErrNotExist) && exists(dir) {
		return 0, nil
	}
	return v, err
}

func (c *v2Cgroup) Stats(context.Context) (Stats, error) {
	var s Stats
	d := c.m.dir(c.name)
	kv, err := readKeyed(d, "cpu.stat")
	if err != nil {
		return s, c.wrap("stats", err)
	}
	s.CPUUsageNanos = kv["usage_usec"] * 1000
	if s.MemoryBytes, err = optUint(d, "memory.current"); err != nil {
		return s, c.wrap("stats", err)
	}
	if s.MemoryPeakBytes, err = optUint(d, "memory.peak"); err != nil {
		return s, c.wrap("stats", err)
	}
	if s.MemoryPeakBytes < s.MemoryBytes { // kernels before 5.19 have no memory.peak
		s.MemoryPeakBytes = s.MemoryBytes
	}
	if s.MemoryLimit, err = optUint(d, "memory.max"); err != nil {
		return s, c.wrap("stats", err)
	}
	if s.Pids, err = optUint(d, "pids.current"); err != nil {
		return s, c.wrap("stats", err)
	}
	return s, nil
}

func (c *v2Cgroup) Procs(context.Context) ([]int, error) {
	d := c.m.dir(c.name)
	if !exists(d) {
		return nil, c.wrap("procs", fs.ErrNotExist)
	}
	set := map[int]bool{}
	if err := procsTree(d, set); err != nil {
		return nil, c.wrap("procs", err)
	}
	return sortedPids(set), nil
}

func (c *v2Cgroup) OOMKilled(context.Context) (bool, error) {
	d := c.m.dir(c.name)
	kv, err := readKeyed(d, "memory.events")
	if errors.Is(err, fs.ErrNotExist) && exists(d) {
		return false, nil // no memory controller: no memory limit either
	}
	if err != nil {
		return false, c.wrap("memory.events", err)
	}
	return kv["oom_kill"] > 0, nil
}

func (c *v2Cgroup) PidsLimitHit(context.Context) (bool, error) {
	d := c.m.dir(c.name)
	kv, err := readKeyed(d, "pids.events")
	if errors.Is(err, fs.ErrNotExist) && exists(d) {
		return false, nil // no pids controller: no pids limit either
	}
	if err != nil {
		return false, c.wrap("pids.events", err)
	}
	return kv["max"] > 0, nil
}

// KillAll kills every task with cgroup.kill (Linux 5.14+), or by freezing,
// SIGKILLing every task and thawing where cgroup.kill is missing, then
// removes the cgroup.
func (c *v2Cgroup) KillAll(ctx context.Context) error {
	d := c.m.dir(c.name)
	if !exists(d) {
		return nil
	}
	deadline := time.Now().Add(killTimeout)
	hasKill := true
	if _, err := os.Stat(filepath.Join(d, "cgroup.kill")); err != nil {
		hasKill = false
	}
	for round := 0; ; round++ {
		set := map[int]bool{}
		if err := procsTree(d, set); err != nil {
			return c.wrap("kill", err)
		}
		if len(set) == 0 {
			break
		}
		if hasKill {
			if err := writeFile(d, "cgroup.kill", "1"); err != nil {
				return c.wrap("kill", err)
			}
		} else {
			_ = writeFile(d, "cgroup.freeze", "1")
			killPids(set)
			_ = writeFile(d, "cgroup.freeze", "0")
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
	if err := rmdirTree(ctx, d, deadline); err != nil {
		return c.wrap("remove", err)
	}
	return nil
}
