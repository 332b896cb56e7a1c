package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Access is a set of permission bits to check: read, write, execute/search.
type Access uint32

// The access bits, as in access(2).
const (
	Read    Access = 4
	Write   Access = 2
	Execute Access = 1
)

// ErrPermission is wrapped by the errors of the access checks; it is of the
// forbidden class.
var ErrPermission = fmt.Errorf("permission denied: %w", errdefs.ErrForbidden)

// CheckAccess reports whether the user may access path with want, following
// symbolic links: every directory on the way must be searchable and the
// target must grant want. A missing path is a not-found error. Root passes
// every check.
func (u *User) CheckAccess(path string, want Access) error {
	if u.IsRoot() {
		return nil
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("path %q: %w", path, errdefs.ErrNotFound)
		}
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("path %q: %w", path, ErrPermission)
		}
		return fmt.Errorf("path %q: %w", path, err)
	}
	if err := u.checkSearch(filepath.Dir(real)); err != nil {
		return fmt.Errorf("path %q: %w", path, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("path %q: %w", path, errdefs.ErrNotFound)
	}
	if !u.grants(st, want) {
		return fmt.Errorf("path %q: %w", path, ErrPermission)
	}
	return nil
}

// CheckCreate reports whether the user may create (or replace) an entry at
// path: the nearest existing ancestor must be writable and searchable, and
// an existing target must be writable. Directories that do not exist yet
// are created by envd on the user's behalf and owned by the user.
func (u *User) CheckCreate(path string) error {
	if u.IsRoot() {
		return nil
	}
	if _, err := os.Lstat(path); err == nil {
		if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
			return u.CheckAccess(path, Write)
		}
	}
	dir := filepath.Dir(path)
	for {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return u.CheckAccess(dir, Write|Execute)
}

// CheckRemove reports whether the user may remove or rename the entry at
// path: its directory must be writable and searchable, and with the sticky
// bit set the user must own the entry or the directory.
func (u *User) CheckRemove(path string) error {
	if u.IsRoot() {
		return nil
	}
	dir := filepath.Dir(path)
	if err := u.CheckAccess(dir, Write|Execute); err != nil {
		return err
	}
	dst, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("path %q: %w", dir, errdefs.ErrNotFound)
	}
	if dst.Mode()&fs.ModeSticky != 0 {
		est, err := os.Lstat(path)
		if err != nil {
			return fmt.Errorf("path %q: %w", path, errdefs.ErrNotFound)
		}
		if owner(est) != u.UID && owner(dst) != u.UID {
			return fmt.Errorf("path %q: %w", path, ErrPermission)
		}
	}
	return nil
}

// checkSearch checks that every directory from / down to dir is searchable.
func (u *User) checkSearch(dir string) error {
	var chain []string
	for d := dir; ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if d == "/" || d == "." {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		st, err := os.Stat(chain[i])
		if err != nil {
			return fmt.Errorf("directory %q: %w", chain[i], errdefs.ErrNotFound)
		}
		if !u.grants(st, Execute) {
			return fmt.Errorf("directory %q: %w", chain[i], ErrPermission)
		}
	}
	return nil
}

// grants applies the owner/group/other permission bits of st.
func (u *User) grants(st fs.FileInfo, want Access) bool {
	perm := uint32(st.Mode().Perm())
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	var bits uint32
	switch {
	case sys.Uid == u.UID:
		bits = perm >> 6
	case u.inGroup(sys.Gid):
		bits = perm >> 3
	default:
		bits = perm
	}
	return Access(bits&7)&want == want
}

func (u *User) inGroup(gid uint32) bool {
	for _, g := range u.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

func owner(st fs.FileInfo) uint32 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Uid
	}
	return ^uint32(0)
}
