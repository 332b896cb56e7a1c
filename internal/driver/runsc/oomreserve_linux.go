package runsc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/driver/oci"
)

// The sentry at the memory wall (see limits.go): the host's OOM killer
// scores a process by its resident memory plus oom_score_adj × the limit
// / 1000, so a stub (adj 1000) scores the whole limit plus its own memory
// and the sentry (adj 0) its resident memory. That counts every page of
// the guest's memory file the sentry has touched itself (the pages a
// restore loaded, gVisor's pre-populated allocations, the copies of
// copy-on-write pages after a fork: under a fork bomb of Python processes
// nearly all of the guest's memory) and the pages of the runsc binary it
// runs: about 30 MiB, charged to whichever cgroup read them first, so not
// bounded by the sandbox's limit. The sentry then outscores every stub
// (measured: 147,522 pages against 147,451 at a 576 MiB wall) and the
// kernel kills it, which ends the sandbox.
//
// Where the host allows it (the agent holds CAP_SYS_RESOURCE) the driver
// gives the sentry and the gofer sentryOOMScoreAdj. Where it does not (the
// development hosts: root without CAP_SYS_RESOURCE may not lower an
// oom_score_adj), it puts OOMReserveMB into the sandbox's memory cgroup:
// host memory charged to the cgroup (a file on the host's /dev/shm,
// allocated by a helper that joined the cgroup first) that no process
// maps. The wall rises by as much, so the guest keeps its room, but the
// memory the sentry can have charged at the wall is OOMReserveMB less,
// more than the runsc pages it counts beyond the limit: a stub outscores
// it. The reserve is removed with the sandbox.

// sentryOOMScoreAdj is the oom_score_adj of the sentry and the gofer where
// the host lets the driver lower it: never chosen while a stub is left,
// still killable (-1000 would leave a cgroup whose memory is the sentry's
// own with nothing to kill).
const sentryOOMScoreAdj = -999

// reserveDir is where the reserves live: the host's shared memory tmpfs.
const reserveDir = "/dev/shm"

// canLowerOOMScore reports whether this process may lower an
// oom_score_adj: it holds CAP_SYS_RESOURCE.
func canLowerOOMScore() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	const c = unix.CAP_SYS_RESOURCE
	return data[c/32].Effective&(1<<(c%32)) != 0
}

// protectRuntime gives the processes of the sandbox in the cgroup at
// cgroupsPath that are not stubs (the sentry and the gofer)
// sentryOOMScoreAdj.
func protectRuntime(cgroupsPath string) error {
	procs, err := cgroupProcs(cgroupsPath)
	if err != nil {
		return err
	}
	stubs, _, err := listStubs(cgroupsPath)
	if err != nil {
		return err
	}
	isStub := map[int]bool{}
	for _, p := range stubs {
		isStub[p] = true
	}
	for _, p := range procs {
		if isStub[p] {
			continue
		}
		err := os.WriteFile(filepath.Join("/proc", strconv.Itoa(p), "oom_score_adj"), []byte(strconv.Itoa(sentryOOMScoreAdj)), 0)
		if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("cgroup %q: runtime oom_score_adj: %w", cgroupsPath, err)
		}
	}
	return nil
}

// reservePath is the file of the OOM reserve of the sandbox whose cgroup
// is at cgroupsPath.
func reservePath(cgroupsPath string) string {
	name := strings.ReplaceAll(strings.Trim(filepath.Clean("/"+cgroupsPath), "/"), "/", "_")
	return filepath.Join(reserveDir, "warren-oom-reserve-"+name)
}

// makeReserve allocates mb MiB of the host's /dev/shm charged to the
// memory cgroup at cgroupsPath: a shell that moves itself into the cgroup
// and then runs fallocate (tmpfs pages are charged to the cgroup of the
// process that allocates them, and stay so after it exits). /dev/shm is
// writable by every host user: the driver creates the file itself, never
// through a link and never one that exists (one left by a crash is
// removed first), and hands the shell the open file.
func makeReserve(cgroupsPath string, mb int64) error {
	rel := filepath.Clean("/" + cgroupsPath)
	procs := filepath.Join(oci.CgroupRoot, "memory", rel, "cgroup.procs")
	if _, err := os.Stat(procs); err != nil {
		procs = filepath.Join(oci.CgroupRoot, rel, "cgroup.procs") // v2
	}
	path := reservePath(cgroupsPath)
	create := func() (*os.File, error) {
		return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	}
	f, err := create()
	if errors.Is(err, os.ErrExist) {
		_ = os.Remove(path) // a link is removed, not followed
		f, err = create()
	}
	if err != nil {
		return fmt.Errorf("cgroup %q: oom reserve: %w", cgroupsPath, err)
	}
	defer f.Close()
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1" && exec fallocate -l "$2" /proc/self/fd/3`,
		"sh", procs, strconv.FormatInt(mb<<20, 10))
	cmd.ExtraFiles = []*os.File{f}
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("cgroup %q: oom reserve: %v: %s", cgroupsPath, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// hasReserve reports whether the sandbox at cgroupsPath has an OOM reserve.
func hasReserve(cgroupsPath string) bool {
	_, err := os.Stat(reservePath(cgroupsPath))
	return err == nil
}

// removeReserve removes the OOM reserve of the sandbox at cgroupsPath, if
// it has one.
func removeReserve(cgroupsPath string) error {
	if err := os.Remove(reservePath(cgroupsPath)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cgroup %q: remove oom reserve: %w", cgroupsPath, err)
	}
	return nil
}

// orphanReserves lists the OOM reserves of sandboxes under cgroupRoot
// whose cgroup is gone (left by an agent that ended before deleting them).
func orphanReserves(cgroupRoot string) []string {
	prefix := reservePath(cgroupRoot) + "_"
	matches, _ := filepath.Glob(prefix + "*")
	var out []string
	for _, m := range matches {
		cg := filepath.Join(cgroupRoot, strings.TrimPrefix(m, prefix))
		if !oci.CgroupExists(cg) {
			out = append(out, m)
		}
	}
	return out
}
