//go:build !linux

package builder

import (
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// lockFile needs Linux; builds do too, so there is nothing to guard.
func lockFile(p string) (func(), error) { return func() {}, nil }

func tryLockFile(p string) (func(), bool) { return func() {}, true }

// mountsBelow: builds make no mounts off Linux.
func mountsBelow(dir string) ([]string, error) { return nil, nil }

func unmount(p string) (bool, error) {
	return false, fmt.Errorf("unmount %s needs Linux: %w", p, errdefs.ErrUnsupported)
}
