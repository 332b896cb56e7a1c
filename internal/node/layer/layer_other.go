//go:build !linux

package layer

import (
	"context"
	"fmt"
	"io"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

var errNotLinux = fmt.Errorf("root filesystem layers need Linux: %w", errdefs.ErrUnsupported)

// Unpack needs Linux.
func Unpack(ctx context.Context, r io.Reader, dir string, opts Options) error {
	return errNotLinux
}

// Flatten needs Linux.
func Flatten(ctx context.Context, layers []string, dst string) error { return errNotLinux }

// Mount is an overlay mount (Linux only).
type Mount struct {
	Merged string
	Upper  string
}

// MountOverlay needs Linux.
func MountOverlay(lowers []string, scratch string) (*Mount, error) { return nil, errNotLinux }

// Unmount needs Linux.
func (m *Mount) Unmount() error { return errNotLinux }

// Options are the limits and policies of an Unpack (see the Linux build).
type Options struct {
	MaxBytes, MaxEntries int64
	What                 string
	Untrusted, Devices   bool
	Progress             func(written int64)
	Tree                 bool
	Xattr                func(name string) bool
}

// WriteTree needs Linux.
func WriteTree(ctx context.Context, root string, w io.Writer, keep func(name string) bool) error {
	return errNotLinux
}

// WriteDiff needs Linux.
func WriteDiff(ctx context.Context, upper string, w io.Writer, keep func(name string) bool) error {
	return errNotLinux
}
