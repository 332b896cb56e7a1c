// Package hostlock keeps two Warren instances on one host from using the
// same host objects: each instance holds an exclusive lock on every name
// it makes objects under (data directory, cgroup root, nftables table,
// interface prefix), so that a second one started with a name the first
// holds refuses to start, instead of reclaiming the first one's sandboxes
// as leaks.
//
// The locks are flock(2) locks on files: the kernel releases them when the
// process ends, crash included, so a stale lock never blocks a restart.
package hostlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// DefaultDir holds the lock files of names that are not paths.
const DefaultDir = "/run/warren/locks"

// Name is one host name an instance claims.
type Name struct {
	// Kind says what the name is ("cgroup root", "nftables table", ...)
	// and Flag which option sets it; both appear in the error.
	Kind, Flag string
	// Value is the name. For a directory (Path set), the lock file is
	// Path/.warren.lock; otherwise it is Dir/<kind>-<value>.lock.
	Value string
	Path  bool
}

// Locks are the held locks of one instance.
type Locks struct{ files []*os.File }

// Acquire takes a lock on every name, in dir for names that are not paths,
// or fails with errdefs.ErrConflict naming the first one another process
// holds (and its PID). It takes nothing when it fails.
func Acquire(dir string, names []Name) (*Locks, error) {
	l := &Locks{}
	for _, n := range names {
		f, err := lock(dir, n)
		if err != nil {
			l.Release()
			return nil, err
		}
		l.files = append(l.files, f)
	}
	return l, nil
}

func lock(dir string, n Name) (*os.File, error) {
	path := filepath.Join(n.Value, ".warren.lock")
	if !n.Path {
		path = filepath.Join(dir, strings.ReplaceAll(n.Kind, " ", "-")+"-"+strings.ReplaceAll(n.Value, "/", "_")+".lock")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s %q: %w", n.Kind, n.Value, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s %q: %w", n.Kind, n.Value, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := "another process"
			if p, perr := strconv.Atoi(strings.TrimSpace(string(pid))); perr == nil && p > 0 {
				holder = fmt.Sprintf("another Warren instance (pid %d)", p)
			}
			return nil, fmt.Errorf("%s %q is in use by %s: give this one its own %s: %w", n.Kind, n.Value, holder, n.Flag, errdefs.ErrConflict)
		}
		return nil, fmt.Errorf("lock %s %q: %w", n.Kind, n.Value, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// Release gives the locks up. The lock files stay (removing them would
// race another instance taking the same lock).
func (l *Locks) Release() {
	if l == nil {
		return
	}
	for _, f := range l.files {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}
	l.files = nil
}
