//go:build !linux

package netslot

import (
	"fmt"
	"log/slog"
	"net/netip"
	"syscall"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// NewPool is only available on Linux.
func NewPool(cfg Config, log *slog.Logger) (Pool, error) {
	return nil, fmt.Errorf("network slots: %w on this platform", errdefs.ErrUnsupported)
}

// DeleteTable is only available on Linux.
func DeleteTable(cfg Config) error {
	return fmt.Errorf("network slots: %w on this platform", errdefs.ErrUnsupported)
}

// OriginalDst is only available on Linux.
func OriginalDst(c syscall.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, fmt.Errorf("original destination: %w on this platform", errdefs.ErrUnsupported)
}
