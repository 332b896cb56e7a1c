//go:build !linux

package oci

import (
	"fmt"
	"syscall"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// platformSupported fails off Linux: runc and runsc are Linux programs.
func platformSupported() error {
	return fmt.Errorf("OCI runtimes need Linux: %w", errdefs.ErrUnavailable)
}

// processGroup is nil off Linux (nothing runs a runtime there).
func processGroup() *syscall.SysProcAttr { return nil }
