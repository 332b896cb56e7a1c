package oci

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// CgroupRoot is where the cgroup hierarchies are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// OOMKills returns how many processes the memory limit of the cgroup at
// cgroupsPath (an OCI cgroupsPath such as "/warren/sbx-x") has killed: on
// cgroup v1 the oom_kill line of memory.oom_control, on v2 the oom_kill
// line of memory.events. errdefs.ErrNotFound when the cgroup is gone (the
// runtimes remove it on delete, so read it before).
func OOMKills(cgroupsPath string) (uint64, error) {
	rel := filepath.Clean("/" + cgroupsPath)
	candidates := []struct{ file, key string }{
		{filepath.Join(CgroupRoot, "memory", rel, "memory.oom_control"), "oom_kill"},
		{filepath.Join(CgroupRoot, rel, "memory.events"), "oom_kill"},
	}
	for _, c := range candidates {
		n, err := readKey(c.file, c.key)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		return n, err
	}
	return 0, fmt.Errorf("memory cgroup %q: %w", cgroupsPath, errdefs.ErrNotFound)
}

func readKey(file, key string) (uint64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, nil // kernels without the counter: no kill recorded
}

// CgroupExists reports whether any hierarchy has the cgroup at cgroupsPath.
func CgroupExists(cgroupsPath string) bool {
	rel := filepath.Clean("/" + cgroupsPath)
	for _, dir := range []string{"memory", "pids", "cpu", "freezer", ""} {
		if _, err := os.Stat(filepath.Join(CgroupRoot, dir, rel)); err == nil {
			return true
		}
	}
	return false
}

// ProcessAlive reports whether pid is a live process: present and neither
// a zombie nor dead. Runtimes check liveness with kill(pid, 0), which a
// zombie passes until its parent (on some hosts a slow init) reaps it.
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	switch data[i+2] {
	case 'Z', 'X', 'x':
		return false
	}
	return true
}
