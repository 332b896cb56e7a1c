// Package hostlock keeps two Warren instances on one host from using the
// same host objects: each instance holds an exclusive lock on every name
// it makes objects under (data directory, cgroup root, nftables table,
// interface prefix), so that a second one started with a name the first
// holds refuses to start, instead of reclaiming the first one's sandboxes
// as leaks.
//
// The locks are flock(2) locks on files: the kernel releases them when the
// process ends, crash included, so a stale lock never blocks a restart.
// Release removes the lock files of names that are not paths while it
// still holds them, and a taker checks that the file it locked is still the
// one at the path (else it locked a removed file and tries again), so the
// lock directory does not fill with one file per name ever used.
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
type Locks struct{ held []held }

// held is one taken lock; remove is its path when Release removes it.
type held struct {
	f      *os.File
	remove string
}

// Acquire takes a lock on every name, in dir for names that are not paths,
// or fails with errdefs.ErrConflict naming the first one another process
// holds (and its PID). It takes nothing when it fails.
func Acquire(dir string, names []Name) (*Locks, error) {
	l := &Locks{}
	for _, n := range names {
		f, path, err := lock(dir, n)
		if err != nil {
			l.Release()
			return nil, err
		}
		h := held{f: f}
		if !n.Path {
			h.remove = path
		}
		l.held = append(l.held, h)
	}
	return l, nil
}

func lock(dir string, n Name) (*os.File, string, error) {
	path := filepath.Join(n.Value, ".warren.lock")
	if !n.Path {
		path = filepath.Join(dir, strings.ReplaceAll(n.Kind, " ", "-")+"-"+strings.ReplaceAll(n.Value, "/", "_")+".lock")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, "", fmt.Errorf("lock %s %q: %w", n.Kind, n.Value, err)
	}
	for attempt := 0; ; attempt++ {
		f, err := lockFile(path, n)
		if err != nil {
			return nil, "", err
		}
		if current(f, path) {
			return f, path, nil
		}
		// The holder removed the file between our open and our lock:
		// the lock is on a file nobody else will open again.
		f.Close()
		if attempt == 8 {
			return nil, "", fmt.Errorf("lock %s %q: the lock file keeps being replaced: %w", n.Kind, n.Value, errdefs.ErrConflict)
		}
	}
}

// current reports whether f is still the file at path.
func current(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

func lockFile(path string, n Name) (*os.File, error) {
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

// Release gives the locks up, removing the lock files of names that are
// not paths first (a directory's .warren.lock stays with the directory).
func (l *Locks) Release() {
	if l == nil {
		return
	}
	for _, h := range l.held {
		if h.remove != "" {
			_ = os.Remove(h.remove)
		}
		_ = unix.Flock(int(h.f.Fd()), unix.LOCK_UN)
		h.f.Close()
	}
	l.held = nil
}
