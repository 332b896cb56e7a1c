package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// RuncRunner runs build commands in runc containers: their own PID, IPC,
// UTS and mount namespaces (and network namespace when the build has no
// network), Docker's default capabilities, the build's root filesystem
// writable. Each Exec is a container of its own unless a Spawn started one
// (the start command), which later Execs then join (the ready command sees
// its processes and ports). Needs root and runc.
//
// RuncRunner is for a single trusted operator: runc containers share the
// host's kernel, and the build has no network slot of its own. Builds
// that tenants send run in driverrun.Runner sandboxes of gVisor (runsc), each
// with a network slot under the rules of sandboxes, as in `warren serve`.
type RuncRunner struct {
	// Runc is the runc binary; "runc" on PATH by default.
	Runc string
	// StateDir is runc's --root; /run/warren/build-runc by default.
	StateDir string
	// ResolvConf is bound to /etc/resolv.conf when the sandbox has network;
	// /etc/resolv.conf by default.
	ResolvConf string
}

var _ Runner = RuncRunner{}

// dockerCaps are Docker's default capabilities: enough for package
// managers, chown, setuid programs.
var dockerCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// Start implements Runner.
func (r RuncRunner) Start(ctx context.Context, req SandboxRequest) (BuildSandbox, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("runc build runner needs root: %w", errdefs.ErrUnsupported)
	}
	bin := r.Runc
	if bin == "" {
		bin = "runc"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("runc build runner: %v: %w", err, errdefs.ErrUnavailable)
	}
	state := r.StateDir
	if state == "" {
		state = "/run/warren/build-runc"
	}
	resolv := r.ResolvConf
	if resolv == "" {
		resolv = "/etc/resolv.conf"
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	bundles, err := os.MkdirTemp("", "warren-build-")
	if err != nil {
		return nil, err
	}
	return &runcSandbox{runc: path, state: state, resolv: resolv, req: req, bundles: bundles}, nil
}

type runcSandbox struct {
	runc, state, resolv string
	req                 SandboxRequest
	bundles             string

	mu      sync.Mutex
	n       int
	live    []string // container IDs to delete at Stop
	main    string   // the spawned container, if any
	keep    []*os.File
	stopped bool
	wg      sync.WaitGroup
}

func (s *runcSandbox) nextID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return fmt.Sprintf("wb-%s-%d", s.req.ID, s.n)
}

func (s *runcSandbox) spec(p Process) *specs.Spec {
	caps := append([]string(nil), dockerCaps...)
	cwd := p.Cwd
	if cwd == "" {
		cwd = "/"
	}
	sp := &specs.Spec{
		Version:  specs.Version,
		Hostname: "build",
		Root:     &specs.Root{Path: s.req.RootFS},
		Process: &specs.Process{
			User: specs.User{UID: uint32(p.UID), GID: uint32(p.GID)},
			Args: p.Args, Env: p.Env, Cwd: cwd,
			Capabilities: &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}},
			Resources:  runcResources(s.req),
			MaskedPaths: []string{"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	if s.req.Network {
		sp.Mounts = append(sp.Mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: s.resolv, Options: []string{"rbind", "ro"}})
	} else {
		sp.Linux.Namespaces = append(sp.Linux.Namespaces, specs.LinuxNamespace{Type: "network"})
	}
	return sp
}

// runcResources turns the request's limits into the container's cgroup
// settings.
func runcResources(req SandboxRequest) *specs.LinuxResources {
	res := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}
	r := req.Resources
	if r.MemoryMB > 0 {
		limit := r.MemoryMB << 20
		res.Memory = &specs.LinuxMemory{Limit: &limit}
	}
	if r.VCPUs > 0 {
		period := uint64(100000)
		quota := int64(r.VCPUs) * int64(period)
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if r.Pids > 0 {
		pids := r.Pids
		res.Pids = &specs.LinuxPids{Limit: &pids}
	}
	return res
}

func (s *runcSandbox) bundle(id string, p Process) (string, error) {
	dir := filepath.Join(s.bundles, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	b, err := json.Marshal(s.spec(p))
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

// outputPipe gives a process a pipe as its output (an *os.File, so exec
// does not wait for the pipe to close) and copies it to w.
func (s *runcSandbox) outputPipe(w io.Writer) (*os.File, func(), error) {
	if w == nil {
		w = io.Discard
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(w, pr); pr.Close() })
	return pw, func() { pw.Close(); wg.Wait() }, nil
}

// Exec implements BuildSandbox.
func (s *runcSandbox) Exec(ctx context.Context, p Process) (int, error) {
	if len(p.Args) == 0 {
		return -1, fmt.Errorf("build process: no command: %w", errdefs.ErrInvalid)
	}
	out := p.Stdout
	if out == nil {
		out = p.Stderr
	}
	pw, wait, err := s.outputPipe(out)
	if err != nil {
		return -1, err
	}
	s.mu.Lock()
	main := s.main
	s.mu.Unlock()
	var cmd *exec.Cmd
	var id string
	if main != "" {
		args := []string{"--root", s.state, "exec", "--user", strconv.Itoa(p.UID) + ":" + strconv.Itoa(p.GID)}
		if p.Cwd != "" {
			args = append(args, "--cwd", p.Cwd)
		}
		for _, e := range p.Env {
			args = append(args, "--env", e)
		}
		args = append(args, main)
		cmd = exec.CommandContext(ctx, s.runc, append(args, p.Args...)...)
	} else {
		id = s.nextID()
		dir, err := s.bundle(id, p)
		if err != nil {
			wait()
			return -1, err
		}
		cmd = exec.CommandContext(ctx, s.runc, "--root", s.state, "run", "--bundle", dir, id)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // runc forwards it
		cmd.WaitDelay = 10 * time.Second
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	err = cmd.Run()
	wait()
	if id != "" {
		s.delete(id)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, fmt.Errorf("runc: %w", err)
	}
	return 0, nil
}

// Spawn implements BuildSandbox.
func (s *runcSandbox) Spawn(ctx context.Context, p Process) error {
	s.mu.Lock()
	if s.stopped || s.main != "" {
		s.mu.Unlock()
		return fmt.Errorf("build sandbox: stopped or already has a start command: %w", errdefs.ErrConflict)
	}
	s.mu.Unlock()
	id := s.nextID()
	// The container's init keeps it alive after the start command ends
	// (as envd does in a sandbox): it runs the command in the background
	// and waits on a pipe that Stop closes.
	init := p
	init.Args = append([]string{"/bin/sh", "-c", `"$@" & read _`, "sh"}, p.Args...)
	dir, err := s.bundle(id, init)
	if err != nil {
		return err
	}
	keepR, keepW, err := os.Pipe()
	if err != nil {
		return err
	}
	out := p.Stdout
	if out == nil {
		out = p.Stderr
	}
	pw, wait, err := s.outputPipe(out)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, s.runc, "--root", s.state, "run", "--detach", "--bundle", dir, id)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = keepR, pw, pw
	err = cmd.Run()
	keepR.Close()
	// The container keeps the pipe's write end; stop waiting for EOF in
	// Stop, not here.
	s.mu.Lock()
	s.live = append(s.live, id)
	s.keep = append(s.keep, keepW)
	if err == nil {
		s.main = id
	}
	s.mu.Unlock()
	s.wg.Go(func() { pw.Close(); wait() })
	if err != nil {
		return fmt.Errorf("runc run %s: %w", id, err)
	}
	return nil
}

func (s *runcSandbox) delete(id string) {
	exec.Command(s.runc, "--root", s.state, "delete", "--force", id).Run()
}

// Stop implements BuildSandbox.
func (s *runcSandbox) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopped = true
	live := s.live
	s.live = nil
	for _, f := range s.keep {
		f.Close()
	}
	s.keep = nil
	s.mu.Unlock()
	for _, id := range live {
		s.delete(id) // kills the container's processes, closing its output
	}
	s.wg.Wait()
	return os.RemoveAll(s.bundles)
}
