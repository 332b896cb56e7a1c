// Package process implements envd's process.Process Connect service: it
// starts commands as the selected user (with pipes or a PTY), streams their
// output to any number of attached clients, and takes input and signals.
//
// A process outlives the streams attached to it: a client that disconnects
// never kills its process; only Connect-Timeout-Ms expiring on the Start
// stream does (as upstream envd). Each pipe process leads its own process
// group and each PTY process its own session, so a signal reaches the whole
// tree it started, also once the process itself has ended (a fork bomb's
// first process exits at once, its processes live on in its group). An
// ended process stays attachable for a while (Manager's retain), and its
// pid stays signalable for as long as its group has members, so that a
// late Connect still receives its end event and a late kill still ends
// its tree.
package process

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"sort"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/envd/identity"
	"github.com/warren-sandbox/warren/internal/envd/state"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errconnect"
)

// Service is the process.Process handler.
type Service struct {
	mgr   *Manager
	auth  *auth.Auth
	state *state.State
}

var _ processconnect.ProcessHandler = (*Service)(nil)

// NewService returns the service.
func NewService(mgr *Manager, a *auth.Auth, st *state.State) *Service {
	return &Service{mgr: mgr, auth: a, state: st}
}

// Handler returns the mount path and HTTP handler of the service.
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return processconnect.NewProcessHandler(s, opts...)
}

// defaultPath is the PATH of a process whose environment has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// resolve turns a start request into start options.
func (s *Service) resolve(h http.Header, req *pb.StartRequest) (startOptions, error) {
	u, err := s.auth.User(auth.BasicUser(h))
	if err != nil {
		return startOptions{}, err
	}
	cfg := req.GetProcess()
	if cfg == nil || cfg.GetCmd() == "" {
		return startOptions{}, errdefs.Classf(errdefs.ErrInvalid, "process.cmd is required")
	}
	dir, err := workdir(u, cfg.Cwd, s.state.DefaultWorkdir())
	if err != nil {
		return startOptions{}, err
	}
	o := startOptions{
		config: cfg,
		user:   u,
		env:    buildEnv(s.state.Env(), u, cfg.GetEnvs()),
		dir:    dir,
		tag:    req.Tag,
		stdin:  req.Stdin == nil || req.GetStdin(),
	}
	if req.Pty != nil {
		o.pty = req.GetPty().GetSize()
		if o.pty == nil {
			o.pty = &pb.PTY_Size{Cols: 80, Rows: 24}
		}
	}
	return o, nil
}

// workdir resolves the working directory: the request's cwd (relative to
// home), else the default workdir, else home. A missing request cwd is an
// invalid argument; a missing default falls back to home.
func workdir(u *identity.User, cwd *string, def string) (string, error) {
	if cwd != nil && *cwd != "" {
		dir := u.ResolvePath(*cwd, "")
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return "", errdefs.Classf(errdefs.ErrInvalid, "cwd '%s' does not exist", dir)
		}
		if err := u.CheckAccess(dir, identity.Execute); err != nil {
			return "", fmt.Errorf("cwd '%s': %w", dir, err)
		}
		return dir, nil
	}
	for _, d := range []string{def, u.Home, "/"} {
		if d == "" {
			continue
		}
		d = u.ResolvePath(d, "")
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d, nil
		}
	}
	return "/", nil
}

// buildEnv layers the environment: template and /init variables, then the
// user's identity (HOME, USER, LOGNAME), then the request's variables.
func buildEnv(base map[string]string, u *identity.User, req map[string]string) []string {
	m := maps.Clone(base)
	if m == nil {
		m = map[string]string{}
	}
	if m["PATH"] == "" {
		m["PATH"] = defaultPath
	}
	m["HOME"] = u.Home
	m["USER"] = u.Name
	m["LOGNAME"] = u.Name
	maps.Copy(m, req)
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// List returns the running processes.
func (s *Service) List(_ context.Context, _ *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	resp := &pb.ListResponse{}
	for _, p := range s.mgr.running() {
		resp.Processes = append(resp.Processes, &pb.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag})
	}
	return connect.NewResponse(resp), nil
}

// live resolves a selector to a process that has not ended.
func (s *Service) live(sel *pb.ProcessSelector) (*proc, error) {
	p, err := s.mgr.selectProc(sel)
	if err != nil {
		return nil, err
	}
	if p.ended() {
		if t := sel.GetTag(); t != "" {
			return nil, errdefs.Classf(errdefs.ErrNotFound, "process with tag %q not found", t)
		}
		return nil, errdefs.Classf(errdefs.ErrNotFound, "process with pid %d not found", p.pid)
	}
	return p, nil
}

// SendInput writes input to a process.
func (s *Service) SendInput(_ context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.live(req.Msg.GetProcess())
	if err != nil {
		return nil, errconnect.From(err)
	}
	if err := p.writeInput(req.Msg.GetInput()); err != nil {
		return nil, errconnect.From(err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// StreamInput writes a client stream of input to one process, in order.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			q, err := s.live(ev.Start.GetProcess())
			if err != nil {
				return nil, errconnect.From(err)
			}
			p = q
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, errconnect.From(errdefs.Classf(errdefs.ErrInvalid, "stream input: start event must come first"))
			}
			if err := p.writeInput(ev.Data.GetInput()); err != nil {
				return nil, errconnect.From(err)
			}
		case *pb.StreamInputRequest_Keepalive:
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

// SendSignal delivers SIGTERM or SIGKILL to a process's group, also after
// the process itself ended while the group lives on (proc.signal). Pid 0
// names no process but every process of the request's user (the default
// user when the request names none): the way to reset a sandbox whose
// user's processes got out of hand, a fork bomb's included
// (docs/configuration.md). It answers not found when nothing was left to
// signal.
func (s *Service) SendSignal(_ context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	var sig unix.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = unix.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = unix.SIGTERM
	default:
		return nil, errconnect.From(errdefs.Classf(errdefs.ErrInvalid, "signal %v", req.Msg.GetSignal()))
	}
	if sel, ok := req.Msg.GetProcess().GetSelector().(*pb.ProcessSelector_Pid); ok && sel.Pid == 0 {
		if err := s.signalUser(req.Header(), sig); err != nil {
			return nil, errconnect.From(err)
		}
		return connect.NewResponse(&pb.SendSignalResponse{}), nil
	}
	p, err := s.mgr.selectProc(req.Msg.GetProcess())
	if err != nil {
		return nil, errconnect.From(err)
	}
	if err := p.signal(sig); err != nil {
		return nil, errconnect.From(err)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// signalUser sends sig to every process of the request's user.
func (s *Service) signalUser(h http.Header, sig unix.Signal) error {
	u, err := s.auth.User(auth.BasicUser(h))
	if err != nil {
		return err
	}
	err = signalUser(u.UID, sig)
	if errors.Is(err, unix.ESRCH) {
		return errdefs.Classf(errdefs.ErrNotFound, "no process of user %q to signal", u.Name)
	}
	if err != nil {
		return fmt.Errorf("signal the processes of user %q: %w", u.Name, err)
	}
	return nil
}

// CloseStdin closes a pipe process's stdin.
func (s *Service) CloseStdin(_ context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.live(req.Msg.GetProcess())
	if err != nil {
		return nil, errconnect.From(err)
	}
	if p.pty != nil {
		return nil, errconnect.From(errdefs.Classf(errdefs.ErrConflict, "process %d uses a pty; send Ctrl+D (0x04) instead", p.pid))
	}
	p.closeStdin()
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// Update resizes a process's PTY.
func (s *Service) Update(_ context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.live(req.Msg.GetProcess())
	if err != nil {
		return nil, errconnect.From(err)
	}
	if req.Msg.Pty != nil {
		if err := p.resize(req.Msg.GetPty().GetSize()); err != nil {
			return nil, errconnect.From(err)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}
