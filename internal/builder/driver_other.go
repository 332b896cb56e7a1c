//go:build !linux

package builder

import (
	"context"
	"fmt"
	"io"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// DriverRunner runs build steps in sandboxes of a runtime driver; the
// runtime drivers need Linux (see driver_linux.go for the fields).
type DriverRunner struct {
	Driver     driver.Driver
	Init       string
	InitArgs   []string
	BundleRoot string
	NetNS      func(ctx context.Context, id string) (path string, release func(), err error)
	ResolvConf string
	Log        io.Writer
}

var _ Runner = DriverRunner{}

// Start implements Runner.
func (DriverRunner) Start(context.Context, SandboxRequest) (BuildSandbox, error) {
	return nil, fmt.Errorf("driver build runner needs Linux: %w", errdefs.ErrUnavailable)
}
