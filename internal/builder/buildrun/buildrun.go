// Package buildrun is the contract between the template builder and what
// runs its build steps (a Runner and its BuildSandboxes), apart from both
// so that the builder links no runtime driver: internal/builder/driverrun
// implements it over a runtime driver (runsc, runc), whose OCI spec is
// internal/driver/oci's like every sandbox's.
package buildrun

import (
	"context"
	"io"

	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Runner starts build sandboxes: the environment in which RUN steps and
// the start and ready commands execute.
//
// Lifecycle: Start → (Exec | Spawn)* → Stop. The builder prepares the root
// filesystem (an overlay of the layers below with a fresh writable upper
// directory) and mounts it at rootfs; whatever the processes write there
// becomes the step's layer, so a Runner must write through to rootfs (a
// runsc sandbox needs --overlay2=none for that). Stop ends every process
// the sandbox started and releases what the Runner holds; the builder then
// unmounts and keeps the upper directory.
type Runner interface {
	Start(ctx context.Context, req SandboxRequest) (BuildSandbox, error)
}

// SandboxRequest describes a build sandbox.
type SandboxRequest struct {
	// ID names the sandbox (host objects carry it).
	ID string
	// RootFS is the sandbox's writable root filesystem.
	RootFS string
	// Network gives the sandbox outbound network access (package installs).
	Network bool
	// Resources bound the sandbox (zero fields: no limit).
	Resources sandbox.Resources
}

// BuildSandbox is one running build sandbox.
type BuildSandbox interface {
	// Exec runs p and waits for it; a non-zero exit is not an error.
	Exec(ctx context.Context, p Process) (exitCode int, err error)
	// Spawn starts p in the background (a start command); it runs until
	// it exits or the sandbox stops.
	Spawn(ctx context.Context, p Process) error
	// Stop ends every process of the sandbox and releases it.
	Stop(ctx context.Context) error
}

// Process is a command in a build sandbox.
type Process struct {
	Args []string
	Env  []string // KEY=VALUE
	Cwd  string
	// UID and GID are resolved by the builder from the root filesystem's
	// /etc/passwd.
	UID, GID int
	Stdout   io.Writer
	Stderr   io.Writer
}
