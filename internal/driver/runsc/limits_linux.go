package runsc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/driver/oci"
)

// stubOOMScoreAdj is the oom_score_adj of every stub process: the host's
// OOM killer takes a stub (one guest process) before the sentry or gofer.
const stubOOMScoreAdj = 1000

// setHostWall sets the limits of the sandbox's host cgroup at cgroupsPath
// once the sandbox runs: pids.max to pids, and memory to HostMemoryWall of
// guestMB and reserveMB (guestMB 0: no limit set).
func setHostWall(cgroupsPath string, guestMB, pids, reserveMB int64) error {
	if err := setPidsWall(cgroupsPath, pids); err != nil {
		return err
	}
	return raiseMemoryWall(cgroupsPath, guestMB, reserveMB)
}

// setPidsWall sets pids.max of the host cgroup at cgroupsPath to pids, if
// the cgroup exists. runsc leaves the limits of a cgroup it did not
// create alone, and the node creates it with the guest's task limit, too
// low for the sentry to boot.
func setPidsWall(cgroupsPath string, pids int64) error {
	rel := filepath.Clean("/" + cgroupsPath)
	for _, dir := range []string{filepath.Join(oci.CgroupRoot, "pids", rel), filepath.Join(oci.CgroupRoot, rel)} {
		f := filepath.Join(dir, "pids.max")
		if _, err := os.Stat(f); err != nil {
			continue
		}
		if err := os.WriteFile(f, []byte(strconv.FormatInt(pids, 10)), 0); err != nil {
			return fmt.Errorf("pids cgroup %q: limit: %w", cgroupsPath, err)
		}
		return nil
	}
	return nil
}

// raiseMemoryWall sets the memory limit of the host cgroup at cgroupsPath
// to HostMemoryWall(guestMB, reserveMB) (v1: memory.limit_in_bytes and,
// where swap is accounted, memory.memsw.limit_in_bytes, raised in the
// order the kernel accepts; v2: memory.max). guestMB 0 (no limit) does
// nothing.
func raiseMemoryWall(cgroupsPath string, guestMB, reserveMB int64) error {
	if guestMB <= 0 {
		return nil
	}
	val := strconv.FormatInt(HostMemoryWall(guestMB, reserveMB), 10)
	rel := filepath.Clean("/" + cgroupsPath)
	v1 := filepath.Join(oci.CgroupRoot, "memory", rel)
	if _, err := os.Stat(filepath.Join(v1, "memory.limit_in_bytes")); err == nil {
		memsw := filepath.Join(v1, "memory.memsw.limit_in_bytes")
		if _, err := os.Stat(memsw); err == nil {
			if err := os.WriteFile(memsw, []byte(val), 0); err != nil {
				return fmt.Errorf("memory cgroup %q: memsw limit: %w", cgroupsPath, err)
			}
		}
		if err := os.WriteFile(filepath.Join(v1, "memory.limit_in_bytes"), []byte(val), 0); err != nil {
			return fmt.Errorf("memory cgroup %q: limit: %w", cgroupsPath, err)
		}
		return nil
	}
	if err := os.WriteFile(filepath.Join(oci.CgroupRoot, rel, "memory.max"), []byte(val), 0); err != nil {
		return fmt.Errorf("memory cgroup %q: limit: %w", cgroupsPath, err)
	}
	return nil
}

// cgroupProcs lists the processes of the cgroup at cgroupsPath (the pids
// hierarchy on v1, the unified one on v2).
func cgroupProcs(cgroupsPath string) ([]int, error) {
	rel := filepath.Clean("/" + cgroupsPath)
	var data []byte
	var err error
	for _, dir := range []string{filepath.Join(oci.CgroupRoot, "pids", rel), filepath.Join(oci.CgroupRoot, rel)} {
		if data, err = os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup %q: procs: %w", cgroupsPath, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// procParentStart reads the parent PID and the start time (in clock
// ticks since boot) of process pid from /proc/<pid>/stat.
func procParentStart(pid int) (ppid int, start uint64, err error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// The fields after the parenthesised command name: state (3), ppid (4),
	// ..., starttime (22).
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("process %d: bad stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("process %d: bad stat", pid)
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, fmt.Errorf("process %d: ppid: %w", pid, err)
	}
	if start, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("process %d: start time: %w", pid, err)
	}
	return ppid, start, nil
}
