package builder

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/mountinfo"
)

// lockFile creates p and takes an exclusive flock on it, held until
// release (or the process's death).
func lockFile(p string) (release func(), err error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return func() { f.Close() }, nil
}

// tryLockFile takes the flock of an existing p if no one holds it.
func tryLockFile(p string) (release func(), ok bool) {
	f, err := os.OpenFile(p, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		// No lock file: nothing can hold it.
		return func() {}, true
	}
	if err != nil {
		return nil, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}

// mountsBelow lists the mount points strictly below dir, deepest first
// (a mount point stacked twice appears twice, the upper one first).
func mountsBelow(dir string) ([]string, error) { return mountinfo.Under(dir, false) }

// unmount detaches the mount at p without following a symbolic link
// there; lazily (MNT_DETACH) when it is busy.
func unmount(p string) (lazy bool, err error) {
	err = unix.Unmount(p, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		lazy = true
		err = unix.Unmount(p, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
	}
	if err != nil {
		return lazy, fmt.Errorf("unmount %s: %w", p, err)
	}
	return lazy, nil
}
