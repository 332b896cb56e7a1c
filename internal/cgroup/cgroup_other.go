//go:build !linux

package cgroup

import (
	"fmt"
	"log/slog"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// NewManager is only available on Linux; elsewhere use Noop.
func NewManager(root string, log *slog.Logger) (Manager, error) {
	return nil, fmt.Errorf("cgroup manager: %w on this platform", errdefs.ErrUnsupported)
}
