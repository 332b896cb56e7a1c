package process

import (
	"time"

	"golang.org/x/sys/unix"
)

// A SIGKILL to a process group (or to every process of a user) is
// repeated in the background until nothing is left to signal: gVisor
// signals the members it listed, and a fork that was under way adds its
// child later, even when its parent was killed meanwhile (Linux holds the
// task list lock across the whole signal and fails such a fork; gVisor
// does neither, and under a fork bomb a fork waits seconds for that lock).
// The first signal, whose result the caller gets, ends every process that
// existed; the repeats find the children of forks that were in flight, and
// stop at ESRCH (nothing left; zombies count until their parent, envd for
// orphans, reaps them) or after killRepeatFor.
const (
	killRepeatEvery = 20 * time.Millisecond
	killRepeatFor   = time.Minute
)

// signalGroup sends sig to the process group pgid (repeated for SIGKILL,
// see above). It returns ESRCH when the group had no member to signal.
func signalGroup(pgid int, sig unix.Signal) error {
	return repeatKill(func() error { return unix.Kill(-pgid, sig) }, sig)
}

// repeatKill runs kill once and returns its error; after a SIGKILL that
// reached something it runs kill again in the background until it finds
// nothing or killRepeatFor has passed.
func repeatKill(kill func() error, sig unix.Signal) error {
	err := kill()
	if err != nil || sig != unix.SIGKILL {
		return err
	}
	go func() {
		deadline := time.Now().Add(killRepeatFor)
		for time.Now().Before(deadline) {
			time.Sleep(killRepeatEvery)
			if kill() != nil {
				return
			}
		}
	}()
	return nil
}
