package e2b

import (
	"context"
	"io"
	"maps"
	"time"

	pb "github.com/warren-sandbox/warren/api/envd/process"
)

// Pty runs interactive shells on a pseudo-terminal.
type Pty struct{ e *envd }

// PtyOptions describe a terminal.
type PtyOptions struct {
	Cols, Rows uint32
	// Env is added to the terminal environment (TERM=xterm-256color and a
	// UTF-8 locale by default).
	Env  map[string]string
	Cwd  string
	User string
	// Output receives the terminal's output; OnData is called with it.
	Output io.Writer
	OnData func(data string)
	// Timeout bounds the session (DefaultCommandTimeout when zero; no
	// bound when negative).
	Timeout time.Duration
}

// Create starts /bin/bash -i -l on a terminal of the given size. Wait on
// the handle for its end; SendInput types into it.
func (p *Pty) Create(ctx context.Context, o PtyOptions) (*CommandHandle, error) {
	env := map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
	maps.Copy(env, o.Env)
	cfg := &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}, Envs: env}
	if o.Cwd != "" {
		cfg.Cwd = &o.Cwd
	}
	req := &pb.StartRequest{Process: cfg, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: o.Cols, Rows: o.Rows}}}
	ro := RunOptions{User: o.User, Stdout: o.Output, OnStdout: o.OnData, Timeout: o.Timeout}
	return p.e.start(ctx, req, ro, "start pty")
}

// SendInput writes data to the terminal of pid.
func (p *Pty) SendInput(ctx context.Context, pid uint32, data []byte) error {
	return p.e.input(ctx, pid, &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: data}})
}

// Resize changes the terminal size of pid.
func (p *Pty) Resize(ctx context.Context, pid uint32, cols, rows uint32) error {
	ctx, cancel := p.e.unary(ctx)
	defer cancel()
	req := &pb.UpdateRequest{Process: pidSel(pid), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: cols, Rows: rows}}}
	if _, err := p.e.proc.Update(ctx, rpc(p.e, req, "")); err != nil {
		return rpcErr(err, "resize pty of process %d", pid)
	}
	return nil
}

// Kill sends SIGKILL to the terminal's shell; false when it had ended.
func (p *Pty) Kill(ctx context.Context, pid uint32) (bool, error) {
	return p.e.signal(ctx, pid, pb.Signal_SIGNAL_SIGKILL)
}
