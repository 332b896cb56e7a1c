package builder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// ChrootRunner runs build commands with chroot(2) into the build root
// filesystem, as the step's user, with no other isolation: no namespaces,
// no cgroup, the host's network, no /proc or /dev inside. It is honest for
// simple RUN steps (files, shells, interpreters) and is what most of the
// builder's tests use (a test double: no binary has it); builds run their
// steps in driverrun's sandboxes. Needs root.
type ChrootRunner struct{}

var _ Runner = ChrootRunner{}

// Start implements Runner.
func (ChrootRunner) Start(ctx context.Context, req SandboxRequest) (BuildSandbox, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("chroot build runner needs root: %w", errdefs.ErrUnsupported)
	}
	if fi, err := os.Stat(req.RootFS); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("build sandbox %s: root filesystem %q: %w", req.ID, req.RootFS, errdefs.ErrInvalid)
	}
	return &chrootSandbox{root: req.RootFS}, nil
}

type chrootSandbox struct {
	root    string
	mu      sync.Mutex
	stopped bool
	spawned []*exec.Cmd
	wg      sync.WaitGroup
}

func (s *chrootSandbox) command(ctx context.Context, p Process) (*exec.Cmd, error) {
	if len(p.Args) == 0 {
		return nil, fmt.Errorf("build process: no command: %w", errdefs.ErrInvalid)
	}
	cmd := exec.CommandContext(ctx, p.Args[0], p.Args[1:]...)
	// exec.Command resolves the program on the host's PATH; inside the
	// chroot the kernel resolves an absolute path.
	cmd.Path = p.Args[0]
	cmd.Env = p.Env
	cmd.Dir = p.Cwd
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     s.root,
		Credential: &syscall.Credential{Uid: uint32(p.UID), Gid: uint32(p.GID)},
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd, nil
}

// Exec implements BuildSandbox.
func (s *chrootSandbox) Exec(ctx context.Context, p Process) (int, error) {
	cmd, err := s.command(ctx, p)
	if err != nil {
		return -1, err
	}
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, fmt.Errorf("build process %q: %w", p.Args[0], err)
	}
	return 0, nil
}

// Spawn implements BuildSandbox.
func (s *chrootSandbox) Spawn(ctx context.Context, p Process) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return fmt.Errorf("build sandbox stopped: %w", errdefs.ErrConflict)
	}
	// Spawned processes live until Stop, not until ctx of the call ends.
	cmd, err := s.command(context.WithoutCancel(ctx), p)
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("build process %q: %w", p.Args[0], err)
	}
	s.spawned = append(s.spawned, cmd)
	s.wg.Go(func() { cmd.Wait() })
	return nil
}

// Stop implements BuildSandbox.
func (s *chrootSandbox) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopped = true
	for _, c := range s.spawned {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
