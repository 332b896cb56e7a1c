//go:build !linux

package bench

import (
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func memAvailable() (float64, error) {
	return 0, fmt.Errorf("host memory: %w", errdefs.ErrUnsupported)
}

func memTotal() (float64, error) {
	return 0, fmt.Errorf("host memory: %w", errdefs.ErrUnsupported)
}

func cgroupMemory(string) (float64, error) {
	return 0, fmt.Errorf("cgroup memory: %w", errdefs.ErrUnsupported)
}

func loadAvg() string { return "" }
