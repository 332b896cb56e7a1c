//go:build !linux

package envd

import (
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func dropTaskExemption() (bool, error) { return false, nil }

func setTasksLimit(n uint64) error {
	return fmt.Errorf("task limit: needs Linux: %w", errdefs.ErrUnsupported)
}
