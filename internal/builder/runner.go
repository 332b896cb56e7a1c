package builder

import (
	"context"
	"fmt"

	"github.com/warren-sandbox/warren/internal/builder/buildrun"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// The build-sandbox contract lives in buildrun (so that the one runner,
// driverrun's, which runs build steps in sandboxes of a runtime driver,
// is apart from the builder); these aliases keep the builder's code
// reading as before.
type (
	Runner         = buildrun.Runner
	SandboxRequest = buildrun.SandboxRequest
	BuildSandbox   = buildrun.BuildSandbox
	Process        = buildrun.Process
)

// noRunner is the Runner of a build engine given none (OpenLocal without
// LocalConfig.Runner): it runs no step, so only builds without one (a
// sandbox's snapshot, a system template) succeed.
type noRunner struct{}

// Start implements Runner.
func (noRunner) Start(_ context.Context, req SandboxRequest) (BuildSandbox, error) {
	return nil, fmt.Errorf("build sandbox %s: this build engine has no runner for build steps: %w", req.ID, errdefs.ErrUnsupported)
}
