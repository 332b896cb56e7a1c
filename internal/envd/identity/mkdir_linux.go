package identity

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Writes are made by envd (root) on the user's behalf, as E2B's envd makes
// them: any path may be written, and what is created belongs to the user.
// Ownership is given through the descriptor of the entry just created, so
// a component swapped for a symbolic link meanwhile cannot make envd
// chown something else.

// OpenDirAll opens the directory dir (absolute), creating it and its
// missing parents with mode 0755, each created directory given to the
// user. created reports whether dir itself was created. An existing
// non-directory on the way is an invalid-argument error.
func (u *User) OpenDirAll(dir string) (f *os.File, created bool, err error) {
	if !filepath.IsAbs(dir) {
		return nil, false, errdefs.Classf(errdefs.ErrInvalid, "path %q is not absolute", dir)
	}
	cur, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, fmt.Errorf("open /: %w", err)
	}
	for _, name := range split(dir) {
		fd, made, err := u.openOrMkdir(cur, name)
		unix.Close(cur)
		if err != nil {
			return nil, false, fmt.Errorf("directory %q: %w", dir, err)
		}
		cur, created = fd, made
	}
	return os.NewFile(uintptr(cur), dir), created, nil
}

// openOrMkdir opens the directory name in dir, creating it (owned by the
// user) when missing.
func (u *User) openOrMkdir(dir int, name string) (fd int, created bool, err error) {
	fd, err = unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		if errors.Is(err, unix.ENOTDIR) {
			return -1, false, errdefs.Classf(errdefs.ErrInvalid, "%q is not a directory", name)
		}
		return fd, false, classify(err)
	}
	switch err := unix.Mkdirat(dir, name, 0o755); {
	case err == nil:
		created = true
	case errors.Is(err, unix.EEXIST): // made meanwhile
	default:
		return -1, false, classify(err)
	}
	fd, err = unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false, classify(err)
	}
	if created {
		if err := u.fchown(fd); err != nil {
			unix.Close(fd)
			return -1, false, err
		}
	}
	return fd, created, nil
}

// MkdirAll creates dir and its missing parents (see OpenDirAll). It
// reports whether dir itself was created.
func (u *User) MkdirAll(dir string) (bool, error) {
	f, created, err := u.OpenDirAll(dir)
	if err != nil {
		return false, err
	}
	return created, f.Close()
}

// Mkdir creates the directory path and its missing parents; an existing
// path is an already-exists error (a directory) or an invalid-argument
// error (anything else).
func (u *User) Mkdir(path string) error {
	parent, _, err := u.OpenDirAll(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer parent.Close()
	name := filepath.Base(path)
	if err := unix.Mkdirat(int(parent.Fd()), name, 0o755); err != nil {
		if errors.Is(err, unix.EEXIST) {
			var st unix.Stat_t
			if unix.Fstatat(int(parent.Fd()), name, &st, 0) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return errdefs.Classf(errdefs.ErrAlreadyExists, "directory already exists: %s", path)
			}
			return errdefs.Classf(errdefs.ErrInvalid, "path already exists but is not a directory: %s", path)
		}
		return fmt.Errorf("directory %q: %w", path, classify(err))
	}
	fd, err := unix.Openat(int(parent.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("directory %q: %w", path, classify(err))
	}
	defer unix.Close(fd)
	return u.fchown(fd)
}

// CreateFile opens path for writing, truncated, creating its missing
// parents; a new file has mode 0644 and belongs to the user, an existing
// one (a final symbolic link is followed, as a shell's ">" does) keeps its
// owner. A directory at path is an invalid-argument error.
func (u *User) CreateFile(path string) (*os.File, error) {
	parent, _, err := u.OpenDirAll(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	name := filepath.Base(path)
	fd, err := unix.Openat(int(parent.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	switch {
	case err == nil:
		if err := u.fchown(fd); err != nil {
			unix.Close(fd)
			return nil, err
		}
	case errors.Is(err, unix.EEXIST):
		fd, err = unix.Openat(int(parent.Fd()), name, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if errors.Is(err, unix.EISDIR) {
			return nil, errdefs.Classf(errdefs.ErrInvalid, "path '%s' is a directory", path)
		}
		if err != nil {
			return nil, fmt.Errorf("open '%s': %w", path, classify(err))
		}
	default:
		return nil, fmt.Errorf("open '%s': %w", path, classify(err))
	}
	return os.NewFile(uintptr(fd), path), nil
}

// fchown gives the open fd to the user and the user's primary group. It is
// a no-op for root.
func (u *User) fchown(fd int) error {
	if u.IsRoot() {
		return nil
	}
	if err := unix.Fchown(fd, int(u.UID), int(u.GID)); err != nil {
		return fmt.Errorf("chown to %s: %w", u.Name, classify(err))
	}
	return nil
}
