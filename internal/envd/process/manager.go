package process

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	pb "github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/internal/envd/identity"
	"github.com/warren-sandbox/warren/internal/envd/logbuf"
	"github.com/warren-sandbox/warren/internal/envd/reaper"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Spawner forks children and reports their exit; see package reaper.
type Spawner interface {
	Spawn(start reaper.StartFunc) (<-chan unix.WaitStatus, error)
}

var (
	_ Spawner = reaper.Direct{}
	_ Spawner = (*reaper.Reaper)(nil)
)

// Manager owns the processes started through the Process service.
type Manager struct {
	log     *slog.Logger
	spawner Spawner
	retain  time.Duration

	mu    sync.Mutex
	procs map[uint32]*proc

	startLog *logbuf.Buffer // nil: the start command's output is not kept
}

// KeepStartOutput keeps the output of processes tagged StartCmdTag in b,
// one entry per line, besides streaming it. Call it before serving.
func (m *Manager) KeepStartOutput(b *logbuf.Buffer) { m.startLog = b }

// NewManager returns a Manager. Finished processes stay attachable for
// retain (their end event is replayed to a late Connect).
func NewManager(log *slog.Logger, spawner Spawner, retain time.Duration) *Manager {
	return &Manager{log: log, spawner: spawner, retain: retain, procs: map[uint32]*proc{}}
}

// startOptions is a fully resolved start request.
type startOptions struct {
	config *pb.ProcessConfig
	user   *identity.User
	env    []string
	dir    string
	pty    *pb.PTY_Size // nil: pipes
	tag    *string
	stdin  bool
}

// start starts a process and returns it with a first subscriber attached
// before any output can be produced.
func (m *Manager) start(o startOptions) (*proc, *subscriber, error) {
	path, err := lookPath(o.config.GetCmd(), o.env, o.dir)
	if err != nil {
		return nil, nil, err
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{o.config.GetCmd()}, o.config.GetArgs()...),
		Env:         o.env,
		Dir:         o.dir,
		SysProcAttr: &syscall.SysProcAttr{},
	}
	if cred := credential(o.user); cred != nil {
		cmd.SysProcAttr.Credential = cred
	}
	p := newProc(o.config, o.tag)
	var childEnds []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			_ = f.Close()
		}
	}
	type output struct {
		f    *os.File
		wrap func([]byte) *pb.ProcessEvent_DataEvent
		name string // stream name in the kept log
	}
	var outputs []output
	if o.pty != nil {
		master, tty, err := pty.Open()
		if err != nil {
			return nil, nil, fmt.Errorf("open pty: %w", err)
		}
		if err := pty.Setsize(master, &pty.Winsize{Cols: uint16(o.pty.GetCols()), Rows: uint16(o.pty.GetRows())}); err != nil {
			closeAll([]*os.File{master, tty})
			return nil, nil, fmt.Errorf("size pty: %w", err)
		}
		// The terminal belongs to the user it runs for, as with a login.
		_ = os.Chown(tty.Name(), int(o.user.UID), int(o.user.GID))
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr.Setsid = true
		cmd.SysProcAttr.Setctty = true
		childEnds = append(childEnds, tty)
		p.pty = master
		outputs = append(outputs, output{master, func(b []byte) *pb.ProcessEvent_DataEvent {
			return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: b}}
		}, "pty"})
	} else {
		cmd.SysProcAttr.Setpgid = true
		outR, outW, err := os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("stdout pipe: %w", err)
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			closeAll([]*os.File{outR, outW})
			return nil, nil, fmt.Errorf("stderr pipe: %w", err)
		}
		cmd.Stdout, cmd.Stderr = outW, errW
		childEnds = append(childEnds, outW, errW)
		outputs = append(outputs,
			output{outR, func(b []byte) *pb.ProcessEvent_DataEvent {
				return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
			}, "stdout"},
			output{errR, func(b []byte) *pb.ProcessEvent_DataEvent {
				return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
			}, "stderr"})
		if o.stdin {
			inR, inW, err := os.Pipe()
			if err != nil {
				closeAll(append(childEnds, outR, errR))
				return nil, nil, fmt.Errorf("stdin pipe: %w", err)
			}
			cmd.Stdin = inR
			childEnds = append(childEnds, inR)
			p.stdin = inW
		}
		// Without stdin, exec.Cmd connects the child to /dev/null.
	}
	for _, o := range outputs {
		p.outs = append(p.outs, o.f)
	}
	sub, _ := p.subscribe()

	waitCh, err := m.spawner.Spawn(func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	})
	closeAll(childEnds)
	if err != nil {
		closeAll(p.outs)
		p.closeStdin()
		if p.pty != nil {
			_ = p.pty.Close()
		}
		return nil, nil, fmt.Errorf("start %q: %w", o.config.GetCmd(), classifyStartErr(err))
	}
	p.pid = uint32(cmd.Process.Pid)
	_ = cmd.Process.Release()

	m.mu.Lock()
	m.procs[p.pid] = p
	m.mu.Unlock()

	var readers sync.WaitGroup
	keep := m.startLog != nil && o.tag != nil && *o.tag == StartCmdTag
	for _, out := range outputs {
		var w io.WriteCloser
		if keep { // stderr is not an error level: servers log there
			w = m.startLog.Lines("info", map[string]string{"logger": "start-cmd", "stream": out.name})
		}
		readers.Add(1)
		go p.read(out.f, out.wrap, w, sync.OnceFunc(readers.Done))
	}
	go func() {
		ws := <-waitCh
		p.finish(ws, &readers)
		m.log.Debug("process ended", "pid", p.pid, "status", p.end.GetStatus())
		m.forgetLater(p)
	}()
	return p, sub, nil
}

// forgetLater removes the ended process p after the retain time, or
// later while its group still has members (so that a kill of its pid
// still reaches them).
func (m *Manager) forgetLater(p *proc) {
	time.AfterFunc(m.retain, func() {
		if p.groupAlive() {
			m.forgetLater(p)
			return
		}
		m.mu.Lock()
		if m.procs[p.pid] == p {
			delete(m.procs, p.pid)
		}
		m.mu.Unlock()
	})
}

func classifyStartErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return errdefs.Classf(errdefs.ErrInvalid, "%w", err)
	}
	return err
}

// credential returns the credentials to run as u, or nil when envd
// already runs as u.
func credential(u *identity.User) *syscall.Credential {
	if uint32(os.Geteuid()) == u.UID && uint32(os.Getegid()) == u.GID {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
}

// lookPath finds cmd in the PATH of the process's environment.
func lookPath(cmd string, env []string, dir string) (string, error) {
	if cmd == "" {
		return "", errdefs.Classf(errdefs.ErrInvalid, "empty command")
	}
	if strings.Contains(cmd, "/") {
		if !filepath.IsAbs(cmd) {
			return filepath.Join(dir, cmd), nil
		}
		return cmd, nil
	}
	pathVar := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, d := range filepath.SplitList(pathVar) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, cmd)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errdefs.Classf(errdefs.ErrInvalid, "command %q: %w", cmd, fs.ErrNotExist)
}

// get returns the process with pid, running or recently ended.
func (m *Manager) get(pid uint32) (*proc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.procs[pid]; ok {
		return p, nil
	}
	return nil, errdefs.Classf(errdefs.ErrNotFound, "process with pid %d not found", pid)
}

// byTag returns the newest running process with tag, else the newest ended one.
func (m *Manager) byTag(tag string) (*proc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var found *proc
	for _, p := range m.procs {
		if p.tag == nil || *p.tag != tag {
			continue
		}
		if found == nil || (found.ended() && !p.ended()) {
			found = p
		}
	}
	if found == nil {
		return nil, errdefs.Classf(errdefs.ErrNotFound, "process with tag %q not found", tag)
	}
	return found, nil
}

// selectProc resolves a selector.
func (m *Manager) selectProc(sel *pb.ProcessSelector) (*proc, error) {
	switch s := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		return m.get(s.Pid)
	case *pb.ProcessSelector_Tag:
		return m.byTag(s.Tag)
	default:
		return nil, errdefs.Classf(errdefs.ErrInvalid, "process selector: pid or tag required")
	}
}

// running lists the processes that have not ended, by pid.
func (m *Manager) running() []*proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*proc, 0, len(m.procs))
	for _, p := range m.procs {
		if !p.ended() {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}
