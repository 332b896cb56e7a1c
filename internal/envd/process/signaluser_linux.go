package process

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// signalUser sends sig to every process that runs as uid, except envd: one
// kill(-1) from a thread of envd that has taken uid as its real, effective
// and saved user ID, so that the kernel's own permission check chooses the
// processes (no walk of /proc, no fork; see repeatKill for the repeats of
// a SIGKILL). For uid 0 that is every process but envd, which kill(-1)
// spares only as PID 1: elsewhere (tests on a host) it is refused. Inside
// gVisor kill(-1) fails with ESRCH when it signalled nothing (Linux's
// succeeds whenever another process exists, signalled or not).
func signalUser(uid uint32, sig unix.Signal) error {
	if uid == 0 {
		if os.Getpid() != 1 {
			return errdefs.Classf(errdefs.ErrUnsupported, "signal every process: envd is not the sandbox's init")
		}
		return repeatKill(func() error { return unix.Kill(-1, sig) }, sig)
	}
	return repeatKill(func() error { return killAs(uid, sig) }, sig)
}

// killAs runs kill(-1, sig) on a thread of its own that runs as uid. The
// goroutine never unlocks the thread, so the thread ends with it and no
// other goroutine ever runs with the user's identity. The raw syscall
// changes the calling thread alone (syscall.Setresuid would change every
// thread of envd). The main thread cannot end (the Go runtime parks it
// instead, with whatever identity it has), so killAs never uses it: envd
// keeps its main goroutine on it (cmd/envd), and a goroutine that lands
// there anyway gives it back and tries again.
func killAs(uid uint32, sig unix.Signal) error {
	for range 10 {
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			if unix.Gettid() == unix.Getpid() {
				runtime.UnlockOSThread()
				errc <- errMainThread
				return
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
				errc <- fmt.Errorf("take uid %d: %w", uid, e)
				return
			}
			errc <- unix.Kill(-1, sig)
		}()
		if err := <-errc; err != errMainThread {
			return err
		}
	}
	return fmt.Errorf("signal as uid %d: %w", uid, errMainThread)
}

// errMainThread: killAs's goroutine ran on the main thread.
var errMainThread = errdefs.Classf(errdefs.ErrUnavailable, "no thread but the main one to run as the user")
