package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// CLI runs one OCI runtime binary (runsc, runc) with fixed global flags.
type CLI struct {
	Path   string   // the runtime binary
	Global []string // flags before the subcommand, e.g. --root
}

// Command returns the command for one invocation (not started). Its process
// gets its own process group so that a terminal's signals do not reach it.
func (c CLI) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Path, append(append([]string(nil), c.Global...), args...)...)
	cmd.SysProcAttr = processGroup()
	return cmd
}

// Run runs one invocation and returns its stdout. A failure carries the
// runtime's stderr.
func (c CLI) Run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := c.Command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &RunError{Args: args, Err: err, Stderr: strings.TrimSpace(stderr.String())}
	}
	return stdout.Bytes(), nil
}

// RunError is a failed runtime invocation.
type RunError struct {
	Args   []string
	Err    error
	Stderr string
}

func (e *RunError) Error() string {
	name := ""
	if len(e.Args) > 0 {
		name = e.Args[0]
	}
	if e.Stderr != "" {
		return fmt.Sprintf("%s: %v: %s", name, e.Err, e.Stderr)
	}
	return fmt.Sprintf("%s: %v", name, e.Err)
}

func (e *RunError) Unwrap() error { return e.Err }

// Absent reports whether err, a failed invocation on container id, failed
// because the runtime knows no such container. It asks the runtime's own
// list rather than reading its stderr, whose words differ between runc and
// runsc and their versions; a list that fails too says nothing (false).
func (c CLI) Absent(ctx context.Context, id string, err error) bool {
	var re *RunError
	if !errors.As(err, &re) {
		return false
	}
	ids, lerr := c.List(ctx)
	return lerr == nil && !slices.Contains(ids, id)
}

// RuntimeState is the JSON `state` prints.
type RuntimeState struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Pid    int    `json:"pid"`
	Bundle string `json:"bundle"`
}

// State returns the runtime's state of container id; errdefs.ErrNotFound if
// the runtime knows no such container.
func (c CLI) State(ctx context.Context, id string) (RuntimeState, error) {
	out, err := c.Run(ctx, "state", id)
	if err != nil {
		if c.Absent(ctx, id, err) {
			return RuntimeState{}, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
		}
		return RuntimeState{}, fmt.Errorf("sandbox %q: %w", id, err)
	}
	var st RuntimeState
	if err := json.Unmarshal(out, &st); err != nil {
		return RuntimeState{}, fmt.Errorf("sandbox %q: parse state: %w", id, err)
	}
	return st, nil
}

// DriverState maps an OCI status word to a driver state.
func DriverState(status string) driver.State {
	switch status {
	case "created", "creating":
		return driver.StateCreated
	case "running":
		return driver.StateRunning
	case "paused", "pausing":
		return driver.StateFrozen
	default:
		return driver.StateStopped
	}
}

// List returns the IDs of the containers the runtime knows under its root.
func (c CLI) List(ctx context.Context) ([]string, error) {
	out, err := c.Run(ctx, "list", "--quiet")
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ids = append(ids, l)
		}
	}
	return ids, nil
}

// ExecOptions tune CLI.Exec.
type ExecOptions struct {
	// KillInside, when set, is how a cancelled exec ends its process inside
	// the sandbox, given the sandbox-internal PID (runsc does not forward
	// signals of a non-terminal exec); the runtime must support
	// --internal-pid-file. When nil, cancellation sends SIGTERM to the
	// runtime's exec client, which forwards it (runc).
	KillInside func(ctx context.Context, pid int) error
	// CannotExecCode, when not 0, is the exit code with which the runtime's
	// exec says that it could not run the process (runsc: 128); on it
	// Runtime.Exec gives the sandbox's watch a moment before it trusts the
	// runtime's state. CLI.Exec ignores it.
	CannotExecCode int
}

// Exec runs `exec --process` for p in container id and returns the
// process's exit code. A code of -1 and an error mean the runtime could not
// run it; runtime errors that look like exit codes are the caller's to
// disambiguate (by checking the container's state). When ctx ends the
// process is ended too (see ExecOptions) and the error wraps ctx.Err().
func (c CLI) Exec(ctx context.Context, id, bundleDir string, p driver.Process, o ExecOptions) (int, error) {
	proc, err := Process(p)
	if err != nil {
		return -1, fmt.Errorf("sandbox %q: exec: %w", id, err)
	}
	path, err := WriteProcess(bundleDir, proc)
	if err != nil {
		return -1, fmt.Errorf("sandbox %q: exec: %w", id, err)
	}
	defer os.Remove(path)

	args := []string{"exec", "--process", path}
	pidPath := strings.TrimSuffix(path, ".json") + ".pid"
	if o.KillInside != nil {
		args = append(args, "--internal-pid-file", pidPath)
		defer os.Remove(pidPath)
	}
	cmd := c.Command(ctx, append(args, id)...)
	cmd.Stdin = p.Stdin
	cmd.Stdout = orDiscard(p.Stdout)
	cmd.Stderr = orDiscard(p.Stderr)
	cmd.Cancel = func() error {
		if o.KillInside != nil {
			if data, err := os.ReadFile(pidPath); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
					kctx, cancel := context.WithTimeout(context.Background(), waitDelay)
					defer cancel()
					if o.KillInside(kctx, pid) == nil {
						return nil
					}
				}
			}
			return cmd.Process.Kill()
		}
		return cmd.Process.Signal(syscall.SIGTERM)
	}
	cmd.WaitDelay = waitDelay // then SIGKILL to the client
	err = cmd.Run()
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return ExitCode(ee.ProcessState), nil
	}
	if ctx.Err() != nil {
		return -1, fmt.Errorf("sandbox %q: exec: %w", id, ctx.Err())
	}
	return -1, fmt.Errorf("sandbox %q: exec: %w", id, err)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// ExitCode turns a process state into a shell-style exit code (128+signal
// for a signalled process).
func ExitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
