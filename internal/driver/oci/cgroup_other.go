//go:build !linux

package oci

import (
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// OOMKills is unsupported off Linux.
func OOMKills(cgroupsPath string) (uint64, error) {
	return 0, fmt.Errorf("memory cgroup %q: %w", cgroupsPath, errdefs.ErrUnsupported)
}

// CgroupExists is always false off Linux.
func CgroupExists(cgroupsPath string) bool { return false }

// ProcessAlive is always false off Linux.
func ProcessAlive(pid int) bool { return false }
