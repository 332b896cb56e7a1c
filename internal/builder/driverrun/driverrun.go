// Package driverrun runs the template builder's build steps in sandboxes
// of a runtime driver (a buildrun.Runner). It is apart from the builder so
// that the builder, which the control plane imports, links no driver.
package driverrun

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/warren-sandbox/warren/internal/builder/buildrun"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Runner runs build steps in sandboxes of a runtime driver (runsc:
// gVisor; the driver must write through to the root filesystem, as the
// runsc driver does with --overlay2=none). Over the runc driver the
// steps share the host's kernel: that set-up is for a single trusted
// operator only; builds that tenants send run in gVisor. The sandbox's init is a static
// host binary bound into it (envd, as in every sandbox), so any image
// works; every command is an Exec in that sandbox, the start command a
// background one. The mount point the binary needs is removed from the
// root filesystem at Stop, so it does not end up in the layer.
type Runner struct {
	Driver driver.Driver
	// Init is the host path of the static init binary (envd); InitArgs
	// are its arguments.
	Init     string
	InitArgs []string
	// BundleRoot holds the sandboxes' bundles (default $TMPDIR).
	BundleRoot string
	// NetNS, when set, provides a network namespace (with outbound
	// access) for sandboxes that ask for network; without it build
	// sandboxes have no network.
	NetNS func(ctx context.Context, id string) (path string, release func(), err error)
	// ResolvConf is the contents of the sandbox's /etc/resolv.conf when
	// it has network (default: the host's /etc/resolv.conf).
	ResolvConf string
	// Log receives the runtime's diagnostics; may be nil.
	Log io.Writer
}

var _ buildrun.Runner = Runner{}

// InitDir is where the init binary is bound inside a build sandbox.
const InitDir = ".warren-build"

// Start implements buildrun.Runner.
func (r Runner) Start(ctx context.Context, req buildrun.SandboxRequest) (buildrun.BuildSandbox, error) {
	if r.Driver == nil {
		return nil, fmt.Errorf("driver build runner: no driver: %w", errdefs.ErrInvalid)
	}
	id := "bld-" + strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			return c
		}
		return '-'
	}, strings.ToLower(req.ID))
	if r.Init == "" {
		return nil, fmt.Errorf("driver build runner: no init binary (envd): %w", errdefs.ErrInvalid)
	}
	mp := filepath.Join(req.RootFS, InitDir)
	if _, err := os.Lstat(mp); err == nil {
		return nil, fmt.Errorf("build sandbox %s: /%s exists in the image: %w", id, InitDir, errdefs.ErrConflict)
	}
	bundle, err := os.MkdirTemp(r.BundleRoot, "warren-build-bundle-")
	if err != nil {
		return nil, err
	}
	s := &driverSandbox{d: r.Driver, id: id, bundle: bundle, mountPoint: mp}
	spec := driver.Spec{
		ID: id, BundleDir: bundle, RootFS: req.RootFS, Hostname: "build", Log: r.Log, Resources: req.Resources,
		Hosts:  "127.0.0.1\tlocalhost build\n::1\tlocalhost\n",
		Mounts: []driver.Mount{{Source: r.Init, Destination: "/" + InitDir + "/init", ReadOnly: true}},
		Init: driver.Process{
			Args: append([]string{"/" + InitDir + "/init"}, r.InitArgs...),
			Env:  []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Cwd: "/", User: "0:0",
		},
	}
	if req.Network && r.NetNS != nil {
		path, release, err := r.NetNS(ctx, id)
		if err != nil {
			s.cleanup()
			return nil, fmt.Errorf("build sandbox %s: network: %w", id, err)
		}
		s.releaseNet = release
		spec.NetNSPath = path
		spec.ResolvConf = r.ResolvConf
		if spec.ResolvConf == "" {
			if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
				spec.ResolvConf = string(b)
			}
		}
	}
	if err := r.Driver.Start(ctx, spec); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("build sandbox %s: %w", id, err)
	}
	return s, nil
}

type driverSandbox struct {
	d          driver.Driver
	id         string
	bundle     string
	mountPoint string
	releaseNet func()
	wg         sync.WaitGroup
	spawnCtx   context.CancelFunc
	mu         sync.Mutex
}

func (s *driverSandbox) process(p buildrun.Process) driver.Process {
	return driver.Process{
		Args: p.Args, Env: p.Env, Cwd: cwd(p.Cwd),
		User:   strconv.Itoa(p.UID) + ":" + strconv.Itoa(p.GID),
		Stdout: p.Stdout, Stderr: p.Stderr,
	}
}

// Exec implements buildrun.BuildSandbox.
func (s *driverSandbox) Exec(ctx context.Context, p buildrun.Process) (int, error) {
	return s.d.Exec(ctx, s.id, s.process(p))
}

// Spawn implements buildrun.BuildSandbox.
func (s *driverSandbox) Spawn(ctx context.Context, p buildrun.Process) error {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.mu.Lock()
	s.spawnCtx = cancel
	s.mu.Unlock()
	s.wg.Go(func() { s.d.Exec(sctx, s.id, s.process(p)) })
	return nil
}

// Stop implements buildrun.BuildSandbox.
func (s *driverSandbox) Stop(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	err := s.d.Kill(ctx, s.id)
	s.mu.Lock()
	if s.spawnCtx != nil {
		s.spawnCtx()
	}
	s.mu.Unlock()
	s.wg.Wait()
	if derr := s.d.Delete(ctx, s.id); err == nil {
		err = derr
	}
	s.cleanup()
	return err
}

func (s *driverSandbox) cleanup() {
	os.RemoveAll(s.mountPoint) // the bind mount is gone with the sandbox
	os.RemoveAll(s.bundle)
	if s.releaseNet != nil {
		s.releaseNet()
	}
}

// cwd is a process's working directory: the root when none is given.
func cwd(dir string) string {
	if dir == "" {
		return "/"
	}
	return dir
}
