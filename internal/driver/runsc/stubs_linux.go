package runsc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// initStubWait bounds how long markStubs waits for the init's stub: the
// sentry creates a process's stub when the process first runs, which for
// envd is right after `runsc run` or `runsc restore` returns.
const initStubWait = 10 * time.Second

// fileID names a host file in /proc/<pid>/maps terms: device and inode.
type fileID struct {
	major, minor uint32
	ino          uint64
}

// hostFileID returns the fileID of the host file at path.
func hostFileID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, fmt.Errorf("init binary %s: %w", path, err)
	}
	return fileID{unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino}, nil
}

// markStubs gives the stubs of the sandbox in the host cgroup at
// cgroupsPath stubOOMScoreAdj, except those of the init (the processes
// that map initPath, the host file of the init's executable): the stub pool process (the
// oldest stub; every stub forked later, one per new guest address space,
// inherits its score) and every stub that exists already. After a start
// the only other stub is the init's; after a restore from a memory
// snapshot every restored process has one, forked before the pool's
// score was set. The stubs are the processes whose parent is in the
// cgroup too (the sentry forks the pool, the pool the others; the sentry
// and the gofer were started by runsc from outside). markStubs first
// waits (up to initStubWait) for the init's stub, so that the init does
// not inherit the pool's score. It returns the pool process's PID (0 when
// there is no stub yet) and how many stubs it marked.
//
// When the init's executable is not a host file the driver can name (an
// init looked up in $PATH), only the pool is marked: the stubs that exist
// are then the init's after a start, and keep 0 after a restore.
func markStubs(cgroupsPath, initPath string) (pool, marked int, err error) {
	init, initErr := hostFileID(initPath)
	deadline := time.Now().Add(initStubWait)
	var stubs []int
	for {
		if stubs, pool, err = listStubs(cgroupsPath); err != nil {
			return 0, 0, err
		}
		if pool == 0 || initErr != nil || hasInitStub(stubs, init) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if initErr != nil {
		stubs = nil
	}
	if pool == 0 {
		return 0, 0, nil
	}
	// The pool first, so that a stub forked while the others are marked
	// inherits the score.
	if err := setOOMScoreAdj(pool); err != nil {
		return 0, 0, fmt.Errorf("cgroup %q: stub oom_score_adj: %w", cgroupsPath, err)
	}
	marked = 1
	for _, p := range stubs {
		if p == pool || mapsFile(p, init) {
			continue
		}
		if err := setOOMScoreAdj(p); err != nil {
			return 0, 0, fmt.Errorf("cgroup %q: stub oom_score_adj: %w", cgroupsPath, err)
		}
		marked++
	}
	return pool, marked, nil
}

// listStubs returns the stub processes of the cgroup at cgroupsPath and
// the pool process among them (the oldest).
func listStubs(cgroupsPath string) (stubs []int, pool int, err error) {
	procs, err := cgroupProcs(cgroupsPath)
	if err != nil {
		return nil, 0, err
	}
	in := map[int]bool{}
	for _, p := range procs {
		in[p] = true
	}
	poolStart := uint64(0)
	for _, p := range procs {
		ppid, start, err := procParentStart(p)
		if err != nil || !in[ppid] {
			continue // gone, or the sentry or gofer
		}
		stubs = append(stubs, p)
		if pool == 0 || start < poolStart || (start == poolStart && p < pool) {
			pool, poolStart = p, start
		}
	}
	return stubs, pool, nil
}

func hasInitStub(stubs []int, init fileID) bool {
	for _, p := range stubs {
		if mapsFile(p, init) {
			return true
		}
	}
	return false
}

// setOOMScoreAdj sets process pid's oom_score_adj to stubOOMScoreAdj; a
// process that is gone is no error.
func setOOMScoreAdj(pid int) error {
	err := os.WriteFile(filepath.Join("/proc", strconv.Itoa(pid), "oom_score_adj"), []byte(strconv.Itoa(stubOOMScoreAdj)), 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// mapsFile reports whether process pid maps the file f: a stub maps the
// files its guest process maps (the sentry maps host files into it
// directly), so the init's stubs map the init's executable.
func mapsFile(pid int, f fileID) bool {
	file, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "maps"))
	if err != nil {
		return false
	}
	defer file.Close()
	dev := fmt.Sprintf("%02x:%02x", f.major, f.minor)
	ino := strconv.FormatUint(f.ino, 10)
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		// address perms offset dev inode path
		fs := strings.Fields(sc.Text())
		if len(fs) >= 5 && fs[3] == dev && fs[4] == ino {
			return true
		}
	}
	return false
}
