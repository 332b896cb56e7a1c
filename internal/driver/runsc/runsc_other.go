//go:build !linux

package runsc

import (
	"fmt"
	"syscall"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Off Linux New fails (see oci.NewRuntime), so nothing below is reached.

func waitProcAttr() *syscall.SysProcAttr { return nil }

func unmountDetach(path string) error {
	return fmt.Errorf("unmount %s: needs Linux: %w", path, errdefs.ErrUnavailable)
}

func setHostWall(cgroupsPath string, guestMB, pids, reserveMB int64) error { return nil }

func setPidsWall(cgroupsPath string, pids int64) error { return nil }

func markStubs(cgroupsPath, initPath string) (pool, marked int, err error) { return 0, 0, nil }

func canLowerOOMScore() bool { return false }

func protectRuntime(cgroupsPath string) error { return nil }

func makeReserve(cgroupsPath string, mb int64) error { return nil }

func hasReserve(cgroupsPath string) bool { return false }

func removeReserve(cgroupsPath string) error { return nil }

func orphanReserves(cgroupRoot string) []string { return nil }
