package builder

import "github.com/warren-sandbox/warren/internal/builder/buildrun"

// The build-sandbox contract lives in buildrun (so that the driver-backed
// runner, driverrun, is apart from the builder); these aliases keep the
// builder's code reading as before.
type (
	Runner         = buildrun.Runner
	SandboxRequest = buildrun.SandboxRequest
	BuildSandbox   = buildrun.BuildSandbox
	Process        = buildrun.Process
)
