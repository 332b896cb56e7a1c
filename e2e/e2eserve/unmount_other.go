//go:build !linux

package e2eserve

import (
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// unmountDetach needs Linux (nothing is mounted elsewhere: warren serve
// needs Linux).
func unmountDetach(path string) error {
	return fmt.Errorf("unmount %s: needs Linux: %w", path, errdefs.ErrUnavailable)
}
