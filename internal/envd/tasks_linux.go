package envd

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// The guest task limit (the node's /init tasksLimit; see the runsc
// driver's limits.go): envd sets RLIMIT_NPROC, which every process it
// starts inherits, so that a fork bomb or a process flood gets EAGAIN
// inside the sandbox instead of exhausting the host's pids limit. envd
// applies it only when it is exempt itself: it holds CAP_SYS_RESOURCE
// (which the runtime grants init alone) and has dropped it from its
// bounding set, so that no process it starts, sudo included, regains it.
// Without the exemption (runc, tests outside a sandbox) the limit is
// ignored: a limit envd is subject to could stop envd itself.

// dropTaskExemption drops CAP_SYS_RESOURCE from envd's bounding set and
// reports whether envd still holds it effective, i.e. is exempt from the
// task limit while nothing it starts is.
func dropTaskExemption() (bool, error) {
	if !hasEffective(unix.CAP_SYS_RESOURCE) {
		return false, nil
	}
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_RESOURCE, 0, 0, 0); err != nil {
		return false, fmt.Errorf("drop CAP_SYS_RESOURCE from the bounding set: %w", err)
	}
	return true, nil
}

// hasEffective reports whether the process holds capability c effective.
func hasEffective(c uint) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}

// setTasksLimit sets RLIMIT_NPROC (soft and hard) to n tasks per user.
func setTasksLimit(n uint64) error {
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
		return fmt.Errorf("set the task limit to %d: %w", n, err)
	}
	return nil
}
