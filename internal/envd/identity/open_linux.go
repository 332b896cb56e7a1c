package identity

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// CheckAccess reports whether the user may access path with want, following
// symbolic links: every directory on the way must be searchable and the
// target must grant want (checked as Open does). A missing path is a
// not-found error. Root passes every check.
func (u *User) CheckAccess(path string, want Access) error {
	f, err := u.Open(path, unix.O_PATH, want)
	if err != nil {
		return err
	}
	return f.Close()
}

// maxSymlinks bounds symbolic-link expansion, as the kernel's limit does.
const maxSymlinks = 40

// Open opens path (absolute) with flags for the user, following symbolic
// links the way a lookup by that user would, and checks that every
// directory searched on the way grants the user search permission and the
// object opened grants want. Each check is made on an open file
// descriptor of the very object the walk then uses, component by
// component (openat with O_NOFOLLOW; links are read and expanded here), so
// swapping a component for a symbolic link between the check and the use
// cannot redirect the open. Root passes every check. The file's Name is
// the resolved path.
func (u *User) Open(path string, flags int, want Access) (*os.File, error) {
	if !filepath.IsAbs(path) {
		return nil, errdefs.Classf(errdefs.ErrInvalid, "path %q is not absolute", path)
	}
	cur, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /: %w", err)
	}
	defer func() { unix.Close(cur) }()
	var resolved []string // the real path walked so far, below /
	comps := split(path)
	links := 0
	for {
		if len(comps) == 0 {
			// The object is the directory cur itself (path "/" or a
			// link to a directory that ends in "..").
			return u.reopen(cur, ".", "/"+strings.Join(resolved, "/"), flags, want)
		}
		name := comps[0]
		comps = comps[1:]
		if name == "." {
			continue
		}
		if err := u.fdGrants(cur, Execute); err != nil {
			return nil, fmt.Errorf("directory %q: %w", "/"+strings.Join(resolved, "/"), err)
		}
		if name == ".." {
			fd, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("path %q: %w", path, classify(err))
			}
			unix.Close(cur)
			cur = fd
			if len(resolved) > 0 {
				resolved = resolved[:len(resolved)-1]
			}
			continue
		}
		fd, err := unix.Openat(cur, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("path %q: %w", path, classify(err))
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("path %q: %w", path, classify(err))
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			unix.Close(fd)
			if links++; links > maxSymlinks {
				return nil, errdefs.Classf(errdefs.ErrInvalid, "path %q: too many levels of symbolic links", path)
			}
			target, err := readlinkat(cur, name)
			if err != nil {
				return nil, fmt.Errorf("path %q: %w", path, classify(err))
			}
			if filepath.IsAbs(target) {
				root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					return nil, fmt.Errorf("open /: %w", err)
				}
				unix.Close(cur)
				cur, resolved = root, nil
			}
			comps = append(split(target), comps...)
		case len(comps) > 0:
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				unix.Close(fd)
				return nil, errdefs.Classf(errdefs.ErrInvalid, "path %q: %q is not a directory", path, name)
			}
			unix.Close(cur)
			cur = fd
			resolved = append(resolved, name)
		default:
			unix.Close(fd)
			return u.reopen(cur, name, "/"+strings.Join(append(resolved, name), "/"), flags, want)
		}
	}
}

// reopen opens name in dir with flags, not following a final link, and
// checks want on what was opened.
func (u *User) reopen(dir int, name, real string, flags int, want Access) (*os.File, error) {
	fd, err := unix.Openat(dir, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("path %q: %w", real, classify(err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("path %q: %w", real, classify(err))
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK { // swapped for a link meanwhile (O_PATH opens it)
		unix.Close(fd)
		return nil, errdefs.Classf(errdefs.ErrConflict, "path %q changed while it was opened", real)
	}
	if !u.IsRoot() && want != 0 && !u.grantsBits(st.Uid, st.Gid, st.Mode, want) {
		unix.Close(fd)
		return nil, fmt.Errorf("path %q: %w", real, ErrPermission)
	}
	return os.NewFile(uintptr(fd), real), nil
}

// fdGrants checks want against the permission bits of the open fd.
func (u *User) fdGrants(fd int, want Access) error {
	if u.IsRoot() || want == 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return classify(err)
	}
	if !u.grantsBits(st.Uid, st.Gid, st.Mode, want) {
		return ErrPermission
	}
	return nil
}

// split returns the non-empty components of p.
func split(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

func readlinkat(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// classify wraps an errno in its class.
func classify(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return errdefs.Classf(errdefs.ErrNotFound, "%w", err)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: %w", err, ErrPermission)
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EISDIR):
		return errdefs.Classf(errdefs.ErrInvalid, "%w", err)
	default:
		return err
	}
}
