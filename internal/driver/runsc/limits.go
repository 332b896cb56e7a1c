package runsc

import "os"

// Limits under gVisor: the guest's own limits and the host cgroup's wall
// above them (docs/configuration.md, "Sandbox limits under gVisor").
//
// A gVisor sandbox is one host process tree: the sentry (the guest kernel),
// its gofer, and one systrap stub process per guest address space. A host
// limit that fires on the sentry ends every guest process at once, so each
// limit is enforced inside first and the host cgroup stays the outer wall:
//
//   - Tasks: envd limits every process it starts to Resources.Pids tasks per
//     user (RLIMIT_NPROC, which gVisor enforces in the guest: fork fails with
//     EAGAIN). envd itself is exempt (it holds CAP_SYS_RESOURCE, which it
//     drops from its bounding set so that nothing it starts has it). A
//     guest process costs the host two tasks (its stub process and that
//     stub's thread), a guest thread none; the host pids limit is
//     HostPids(Resources.Pids): room for two users at their limit plus the
//     sentry's and gofer's own threads. Only a guest that runs processes
//     under many uids at once (root can) reaches the wall, and the
//     sandbox's kill reason then says pids_limit.
//   - Memory: the guest sees Resources.MemoryMB (runsc's --total-memory is
//     read from the cgroup limit at start); once the sandbox runs the host
//     limit is raised by MemoryOverheadMB for the sentry and gofer. gVisor
//     has no out-of-memory killer of its own, so the host kernel's picks
//     the victim: every stub process gets oom_score_adj 1000 (stubs are
//     forked from one pool process, so later ones inherit it; those that
//     exist already, the restored processes' after a restore, are set one
//     by one) while the sentry, the gofer and the init's stubs (envd's:
//     those that map its binary) keep theirs, and a runaway guest process
//     loses its stub, which kills that process alone. Only memory held by the sentry
//     itself can end the sandbox, with kill reason oom: tmpfs files are
//     bounded below the wall (/tmp is half the guest's memory, see
//     oci.Generate), pipe and socket buffers are not.

// MemoryOverheadMB is the host memory a sandbox may use beyond its guest
// memory: the sentry (about 40 MiB resident, more with many tasks), the
// gofer (about 25 MiB) and the stubs' page tables (measured on the
// development host: an idle sandbox charges 19 MiB to its cgroup, each
// guest process about 0.5 MiB more).
const MemoryOverheadMB = 64

// OOMReserveMB is the OOM reserve of a sandbox with a memory limit where
// the sentry's oom_score_adj cannot be lowered (oomreserve_linux.go): more
// than the runsc binary's pages the sentry maps (about 30 MiB measured).
const OOMReserveMB = 32

// HostMemoryWall is the memory limit in bytes of the host cgroup of a
// sandbox with guestMB of guest memory and an OOM reserve of reserveMB:
// guestMB + MemoryOverheadMB + reserveMB, rounded up to a multiple of 1000
// pages (the kernel gives a process with oom_score_adj 1000 a bonus of
// 1000 × ⌊limit in pages / 1000⌋, so a stub's bonus is then the whole
// limit).
func HostMemoryWall(guestMB, reserveMB int64) int64 {
	page := int64(os.Getpagesize())
	pages := ((guestMB+MemoryOverheadMB+reserveMB)<<20 + page - 1) / page
	return (pages + 999) / 1000 * 1000 * page
}

// hostTasksPerProcess is what one guest process costs the host pids
// cgroup under systrap: the stub process and its thread.
const hostTasksPerProcess = 2

// hostTasksBase is the sentry's and gofer's own threads, with room to spare
// (an idle sandbox has about 30).
const hostTasksBase = 256

// HostPids is the host pids limit of a sandbox whose guest allows
// guestTasks tasks per user: two users (root and the default user) at the
// guest limit, two host tasks per guest process, plus the sentry's and
// gofer's threads.
func HostPids(guestTasks int64) int64 {
	return 2*hostTasksPerProcess*guestTasks + hostTasksBase
}
