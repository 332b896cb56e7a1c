package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// MkdirAll creates dir and its missing parents with mode 0755 and gives
// every directory it created to the user. It reports whether dir itself was
// created. An existing non-directory on the way is an invalid-argument
// error.
func (u *User) MkdirAll(dir string) (bool, error) {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return false, fmt.Errorf("path %q: not a directory: %w", dir, errdefs.ErrInvalid)
		}
		return false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("directory %q: %w", dir, err)
	}
	if parent := filepath.Dir(dir); parent != dir {
		if _, err := u.MkdirAll(parent); err != nil {
			return false, err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("directory %q: %w", dir, err)
	}
	if err := u.Chown(dir); err != nil {
		return true, err
	}
	return true, nil
}

// Chown gives path (not following a final symbolic link) to the user and
// the user's primary group. It is a no-op for root.
func (u *User) Chown(path string) error {
	if u.IsRoot() {
		return nil
	}
	if err := os.Lchown(path, int(u.UID), int(u.GID)); err != nil {
		return fmt.Errorf("chown %q: %w", path, err)
	}
	return nil
}
