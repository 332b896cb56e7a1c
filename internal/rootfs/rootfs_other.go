//go:build !linux

package rootfs

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

var errUnsupported = fmt.Errorf("root filesystems: %w on this platform", errdefs.ErrUnsupported)

// Manager is only implemented on Linux.
type Manager struct{}

// New fails outside Linux.
func New(Config, *slog.Logger) (*Manager, error) { return nil, errUnsupported }

func (*Manager) Prepare(context.Context, Layer) (string, error)         { return "", errUnsupported }
func (*Manager) Unmount(context.Context, string) error                  { return errUnsupported }
func (*Manager) Remount(context.Context, Layer, string) (string, error) { return "", errUnsupported }
func (*Manager) Copy(context.Context, Layer, string) error              { return errUnsupported }
func (*Manager) Destroy(context.Context, string) error                  { return errUnsupported }
func (*Manager) Leaked(context.Context, map[string]bool) ([]Leak, error) {
	return nil, errUnsupported
}
func (*Manager) ReclaimLeaked(context.Context, map[string]bool) (int, error) {
	return 0, errUnsupported
}
