//go:build !linux

package node

import (
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func freeDisk(path string) (uint64, error) {
	return 0, fmt.Errorf("free disk of %s: %w", path, errdefs.ErrUnsupported)
}
