package runsc

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// waitProcAttr is the process attributes of `runsc wait`: its own process
// group, and SIGKILL when its parent dies, so that no waiter outlives the
// agent. The parent-death signal fires when the OS thread that started the
// process exits, not the agent: watchExit then starts a new waiter.
func waitProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// unmountDetach lazily unmounts path; one that is no mount point is fine.
func unmountDetach(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return err
	}
	return nil
}
