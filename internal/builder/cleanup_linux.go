package builder

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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
// (a mount point stacked twice appears twice).
func mountsBelow(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	// Deepest first; among equals, the later (upper) mount first.
	slices.Reverse(out)
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Count(b, "/") - strings.Count(a, "/")
	})
	return out, nil
}

// unescapeMountinfo undoes the octal escapes (\040 and the like) of a
// mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

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
