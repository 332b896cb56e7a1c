package e2b

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"

	pb "github.com/warren-sandbox/warren/api/envd/process"
)

// DefaultCommandTimeout bounds a command's stream when RunOptions.Timeout
// is zero, as in the JS SDK; envd kills the command when it passes.
const DefaultCommandTimeout = 60 * time.Second

// Commands starts and manages processes in a sandbox.
type Commands struct{ e *envd }

// RunOptions describe one command.
type RunOptions struct {
	// Env is added to the sandbox's environment for this command.
	Env map[string]string
	// Cwd is the working directory (the user's home when empty).
	Cwd string
	// User runs the command as this user (the sandbox's default when empty).
	User string
	// Tag names the process so that Connect can find it by tag.
	Tag string
	// Stdout and Stderr receive the output as it arrives.
	Stdout, Stderr io.Writer
	// OnStdout and OnStderr are called with each chunk as it arrives.
	OnStdout, OnStderr func(data string)
	// Stdin keeps the command's stdin open for SendStdin.
	Stdin bool
	// Timeout bounds the command: envd kills it when it passes, also in
	// the background (DefaultCommandTimeout when zero; no bound when
	// negative).
	Timeout time.Duration
}

// CommandResult is how a command ended and what it wrote.
type CommandResult struct {
	ExitCode int
	Stdout   string
	Stderr   string
	// Error is envd's description of a failure ("exit status 1", a
	// signal), empty on success.
	Error string
}

// CommandExitError is returned, with the result, by commands that exit
// non-zero.
type CommandExitError struct {
	CommandResult
}

func (e *CommandExitError) Error() string {
	return fmt.Sprintf("command exited with code %d: %s", e.ExitCode, e.CommandResult.Error)
}

// Run runs cmd with /bin/bash -l -c and waits for it to end. A non-zero
// exit returns the result together with a *CommandExitError.
func (c *Commands) Run(ctx context.Context, cmd string, o RunOptions) (*CommandResult, error) {
	h, err := c.Start(ctx, cmd, o)
	if err != nil {
		return nil, err
	}
	return h.Wait(ctx)
}

// Start starts cmd in the background and returns once envd reports its
// PID. The handle streams the output until the command ends, ctx is
// cancelled, or Disconnect is called; neither of the last two kills the
// command. The command's deadline (RunOptions.Timeout, or ctx's deadline
// when sooner) is sent to envd, which kills the command when it passes.
func (c *Commands) Start(ctx context.Context, cmd string, o RunOptions) (*CommandHandle, error) {
	cfg := &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}, Envs: o.Env}
	if o.Cwd != "" {
		cfg.Cwd = &o.Cwd
	}
	req := &pb.StartRequest{Process: cfg}
	if c.e.supports(envdCommandsStdin) {
		req.Stdin = &o.Stdin // before, stdin is always open
	}
	if o.Tag != "" {
		req.Tag = &o.Tag
	}
	return c.e.start(ctx, req, o, fmt.Sprintf("start command %q", cmd))
}

// Connect attaches to the running process pid and streams its output
// from now on.
func (c *Commands) Connect(ctx context.Context, pid uint32, o RunOptions) (*CommandHandle, error) {
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	return c.e.connect(ctx, sel, o, fmt.Sprintf("connect to process %d", pid))
}

// ConnectTag attaches to the running process started with tag.
func (c *Commands) ConnectTag(ctx context.Context, tag string, o RunOptions) (*CommandHandle, error) {
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}
	return c.e.connect(ctx, sel, o, fmt.Sprintf("connect to process tagged %q", tag))
}

// ProcessInfo is a running process.
type ProcessInfo struct {
	PID  uint32
	Tag  string
	Cmd  string
	Args []string
	Env  map[string]string
	Cwd  string
}

// List returns the processes started through envd that still run.
func (c *Commands) List(ctx context.Context) ([]ProcessInfo, error) {
	ctx, cancel := c.e.unary(ctx)
	defer cancel()
	resp, err := c.e.proc.List(ctx, rpc(c.e, &pb.ListRequest{}, ""))
	if err != nil {
		return nil, rpcErr(err, "list processes")
	}
	var out []ProcessInfo
	for _, p := range resp.Msg.GetProcesses() {
		out = append(out, ProcessInfo{PID: p.GetPid(), Tag: p.GetTag(), Cmd: p.GetConfig().GetCmd(),
			Args: p.GetConfig().GetArgs(), Env: p.GetConfig().GetEnvs(), Cwd: p.GetConfig().GetCwd()})
	}
	return out, nil
}

// Kill sends SIGKILL to pid; false when there is no such process.
func (c *Commands) Kill(ctx context.Context, pid uint32) (bool, error) {
	return c.e.signal(ctx, pid, pb.Signal_SIGNAL_SIGKILL)
}

// SendStdin writes data to the stdin of pid (started with Stdin).
func (c *Commands) SendStdin(ctx context.Context, pid uint32, data []byte) error {
	return c.e.input(ctx, pid, &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: data}})
}

// CloseStdin closes the stdin of pid (end of input).
func (c *Commands) CloseStdin(ctx context.Context, pid uint32) error {
	if err := c.e.require(envdCloseStdin, "closing stdin"); err != nil {
		return fmt.Errorf("close stdin of process %d: %w", pid, err)
	}
	ctx, cancel := c.e.unary(ctx)
	defer cancel()
	_, err := c.e.proc.CloseStdin(ctx, rpc(c.e, &pb.CloseStdinRequest{Process: pidSel(pid)}, ""))
	if err != nil {
		return rpcErr(err, "close stdin of process %d", pid)
	}
	return nil
}

func pidSel(pid uint32) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
}

func (e *envd) signal(ctx context.Context, pid uint32, sig pb.Signal) (bool, error) {
	ctx, cancel := e.unary(ctx)
	defer cancel()
	_, err := e.proc.SendSignal(ctx, rpc(e, &pb.SendSignalRequest{Process: pidSel(pid), Signal: sig}, ""))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return false, nil
	}
	if err != nil {
		return false, rpcErr(err, "signal process %d", pid)
	}
	return true, nil
}

func (e *envd) input(ctx context.Context, pid uint32, in *pb.ProcessInput) error {
	ctx, cancel := e.unary(ctx)
	defer cancel()
	_, err := e.proc.SendInput(ctx, rpc(e, &pb.SendInputRequest{Process: pidSel(pid), Input: in}, ""))
	if err != nil {
		return rpcErr(err, "send input to process %d", pid)
	}
	return nil
}

// eventStream is the part of Start's and Connect's streams the handle reads.
type eventStream interface {
	Receive() bool
	event() *pb.ProcessEvent
	Err() error
	Close() error
}

type startStream struct {
	*connect.ServerStreamForClient[pb.StartResponse]
}

func (s startStream) event() *pb.ProcessEvent { return s.Msg().GetEvent() }

type connectStream struct {
	*connect.ServerStreamForClient[pb.ConnectResponse]
}

func (s connectStream) event() *pb.ProcessEvent { return s.Msg().GetEvent() }

// streamCtx bounds a command's stream by its timeout.
func streamCtx(ctx context.Context, o RunOptions) (context.Context, context.CancelFunc) {
	switch {
	case o.Timeout < 0:
		return context.WithCancel(ctx)
	case o.Timeout == 0:
		return context.WithTimeout(ctx, DefaultCommandTimeout)
	}
	return context.WithTimeout(ctx, o.Timeout)
}

func (e *envd) start(ctx context.Context, req *pb.StartRequest, o RunOptions, what string) (*CommandHandle, error) {
	sctx, cancel := streamCtx(ctx, o)
	s, err := e.proc.Start(sctx, stream(rpc(e, req, o.User)))
	if err != nil {
		cancel()
		return nil, rpcErr(err, "%s", what)
	}
	return newHandle(e, startStream{s}, cancel, o, what)
}

func (e *envd) connect(ctx context.Context, sel *pb.ProcessSelector, o RunOptions, what string) (*CommandHandle, error) {
	sctx, cancel := streamCtx(ctx, o)
	s, err := e.proc.Connect(sctx, stream(rpc(e, &pb.ConnectRequest{Process: sel}, "")))
	if err != nil {
		cancel()
		return nil, rpcErr(err, "%s", what)
	}
	return newHandle(e, connectStream{s}, cancel, o, what)
}

// CommandHandle is a started command.
type CommandHandle struct {
	// PID is the process ID in the sandbox.
	PID uint32

	e      *envd
	s      eventStream
	cancel context.CancelFunc
	o      RunOptions
	what   string
	done   chan struct{}

	mu             sync.Mutex
	stdout, stderr []byte
	end            *pb.ProcessEvent_EndEvent
	err            error
}

// newHandle reads the start event, then streams the rest in the background.
func newHandle(e *envd, s eventStream, cancel context.CancelFunc, o RunOptions, what string) (*CommandHandle, error) {
	if !s.Receive() {
		err := s.Err()
		s.Close()
		cancel()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, rpcErr(err, "%s", what)
	}
	start := s.event().GetStart()
	if start == nil {
		s.Close()
		cancel()
		return nil, fmt.Errorf("%s: expected the start event, got %v", what, s.event())
	}
	h := &CommandHandle{PID: start.GetPid(), e: e, s: s, cancel: cancel, o: o, what: what, done: make(chan struct{})}
	go h.read()
	return h, nil
}

func (h *CommandHandle) read() {
	defer close(h.done)
	defer h.cancel()
	defer h.s.Close()
	for h.s.Receive() {
		ev := h.s.event()
		if d := ev.GetData(); d != nil {
			h.data(d)
		}
		if end := ev.GetEnd(); end != nil {
			h.mu.Lock()
			h.end = end
			h.mu.Unlock()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.s.Err(); err != nil && h.end == nil {
		h.err = rpcErr(err, "%s (pid %d)", h.what, h.PID)
	} else if h.end == nil {
		h.err = fmt.Errorf("%s (pid %d): stream ended before the process", h.what, h.PID)
	}
}

func (h *CommandHandle) data(d *pb.ProcessEvent_DataEvent) {
	switch out := d.GetOutput().(type) {
	case *pb.ProcessEvent_DataEvent_Stdout:
		h.mu.Lock()
		h.stdout = append(h.stdout, out.Stdout...)
		h.mu.Unlock()
		emit(out.Stdout, h.o.Stdout, h.o.OnStdout)
	case *pb.ProcessEvent_DataEvent_Stderr:
		h.mu.Lock()
		h.stderr = append(h.stderr, out.Stderr...)
		h.mu.Unlock()
		emit(out.Stderr, h.o.Stderr, h.o.OnStderr)
	case *pb.ProcessEvent_DataEvent_Pty:
		emit(out.Pty, h.o.Stdout, h.o.OnStdout)
	}
}

func emit(p []byte, w io.Writer, f func(string)) {
	if w != nil {
		w.Write(p) // a failing writer only loses its copy; the result keeps all
	}
	if f != nil {
		f(string(p))
	}
}

// Wait waits for the command to end. A non-zero exit returns the result
// with a *CommandExitError; ctx ending returns its error and leaves the
// command running.
func (h *CommandHandle) Wait(ctx context.Context) (*CommandResult, error) {
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for %s (pid %d): %w", h.what, h.PID, ctx.Err())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return nil, h.err
	}
	r := &CommandResult{ExitCode: int(h.end.GetExitCode()), Stdout: string(h.stdout), Stderr: string(h.stderr), Error: h.end.GetError()}
	if r.ExitCode != 0 {
		return r, &CommandExitError{CommandResult: *r}
	}
	return r, nil
}

// Kill sends SIGKILL to the command; false when it had already ended.
func (h *CommandHandle) Kill(ctx context.Context) (bool, error) {
	return h.e.signal(ctx, h.PID, pb.Signal_SIGNAL_SIGKILL)
}

// SendStdin writes data to the command's stdin (started with Stdin).
func (h *CommandHandle) SendStdin(ctx context.Context, data []byte) error {
	return (&Commands{e: h.e}).SendStdin(ctx, h.PID, data)
}

// CloseStdin closes the command's stdin.
func (h *CommandHandle) CloseStdin(ctx context.Context) error {
	return (&Commands{e: h.e}).CloseStdin(ctx, h.PID)
}

// Disconnect stops streaming the output; the command keeps running
// (Commands.Connect attaches again).
func (h *CommandHandle) Disconnect() {
	h.cancel()
	<-h.done
}
