//go:build !linux

package builder

import (
	"context"
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// ChrootRunner needs Linux.
type ChrootRunner struct{}

// Start implements Runner.
func (ChrootRunner) Start(context.Context, SandboxRequest) (BuildSandbox, error) {
	return nil, fmt.Errorf("chroot build runner needs Linux: %w", errdefs.ErrUnsupported)
}

// RuncRunner needs Linux.
type RuncRunner struct {
	Runc, StateDir, ResolvConf string
}

// Start implements Runner.
func (RuncRunner) Start(context.Context, SandboxRequest) (BuildSandbox, error) {
	return nil, fmt.Errorf("runc build runner needs Linux: %w", errdefs.ErrUnsupported)
}
