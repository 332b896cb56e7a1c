package process

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	pb "github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// drainSilence is how long a reader keeps reading after the process exited
// while no output arrives; it stops output held open by a background
// grandchild from delaying the end event forever.
const drainSilence = 100 * time.Millisecond

// proc is one started process: its output fan-out and its input.
type proc struct {
	pid    uint32
	tag    *string
	config *pb.ProcessConfig
	pty    *os.File // PTY master; nil for pipe processes

	inMu  sync.Mutex
	stdin *os.File // write end of stdin; nil when closed or not kept

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	end  *pb.ProcessEvent_EndEvent
	done chan struct{} // closed after the end event is set

	exited atomic.Bool
	outs   []*os.File // output read ends, for the drain deadline
}

// StartCmdTag is the tag the node gives a template's start command; its
// output is also kept in the sandbox's log (Manager.KeepStartOutput).
const StartCmdTag = "start-cmd"

// subscriber receives the data events of one stream.
type subscriber struct {
	ch   chan *pb.ProcessEvent
	gone chan struct{}
}

func newProc(cfg *pb.ProcessConfig, tag *string) *proc {
	return &proc{config: cfg, tag: tag, subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
}

// subscribe attaches a new stream. It returns nil and the end event when
// the process already ended.
func (p *proc) subscribe() (*subscriber, *pb.ProcessEvent_EndEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		return nil, p.end
	}
	s := &subscriber{ch: make(chan *pb.ProcessEvent, 64), gone: make(chan struct{})}
	p.subs[s] = struct{}{}
	return s, nil
}

func (p *proc) unsubscribe(s *subscriber) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
	close(s.gone)
}

// publish hands ev to every subscriber, waiting for slow ones (output is
// never dropped for a connected stream) unless they leave.
func (p *proc) publish(ev *pb.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

// read copies one output stream into data events until EOF, or until the
// process has exited and the stream stays silent for drainSilence; then it
// calls caughtUp (the end event may go out). Output a PTY's processes
// write later is lost with the terminal; a pipe is drained until EOF
// (drainLeft), then closed.
func (p *proc) read(f *os.File, wrap func([]byte) *pb.ProcessEvent_DataEvent, keep io.WriteCloser, caughtUp func()) {
	if keep != nil {
		defer keep.Close()
	}
	defer f.Close()
	buf := make([]byte, 32<<10)
	for {
		if p.exited.Load() {
			_ = f.SetReadDeadline(time.Now().Add(drainSilence))
		}
		n, err := f.Read(buf)
		if n > 0 {
			data := make([]byte, n)
			copy(data, buf[:n])
			if keep != nil {
				_, _ = keep.Write(data)
			}
			p.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: wrap(data)}})
		}
		if err != nil {
			caughtUp()
			if p.pty == nil && errors.Is(err, os.ErrDeadlineExceeded) {
				drainLeft(f, keep)
			}
			return
		}
	}
}

// A command's processes may outlive it, holding its output pipe: a
// background child, a daemon, a fork bomb's processes (its first one
// exits at once). Once the command's end event is out, envd keeps reading
// what they write and drops it (a start command's goes on into the kept
// log), until all of them have closed the pipe. Were the pipe closed, each
// would die of SIGPIPE at its next write: a background server at its next
// log line, and every process of a fork bomb at its first failed fork
// (bash reports it on stderr), which the bomb's survivors replace as fast
// as the guest forks, a churn that holds gVisor's task and mapping locks
// and delays root's commands by seconds (docs/BENCHMARKS.md, "Fork
// bomb"). The drain reads at most drainChunk every drainPause, so a
// process that writes without end (`yes &`) waits on a full pipe instead
// of costing envd a CPU.
const (
	drainChunk = 16 << 10
	drainPause = 50 * time.Millisecond
)

// drainLeft reads and drops f (a pipe whose command has ended) until EOF,
// at most drainChunk per drainPause; keep, if set, gets what it reads.
func drainLeft(f *os.File, keep io.Writer) {
	_ = f.SetReadDeadline(time.Time{})
	buf := make([]byte, drainChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 && keep != nil {
			_, _ = keep.Write(buf[:n])
		}
		if errors.Is(err, os.ErrDeadlineExceeded) { // finish's, set late
			_ = f.SetReadDeadline(time.Time{})
			continue
		}
		if err != nil {
			return
		}
		time.Sleep(drainPause)
	}
}

// finish records the end event once the exit status is known and the
// readers have caught up (each closes its stream itself, see read).
func (p *proc) finish(ws unix.WaitStatus, readers *sync.WaitGroup) {
	p.exited.Store(true)
	for _, f := range p.outs {
		_ = f.SetReadDeadline(time.Now().Add(drainSilence))
	}
	readers.Wait()
	p.closeStdin()
	end := endEvent(ws)
	p.mu.Lock()
	p.end = end
	p.mu.Unlock()
	close(p.done)
}

func endEvent(ws unix.WaitStatus) *pb.ProcessEvent_EndEvent {
	e := &pb.ProcessEvent_EndEvent{ExitCode: -1}
	switch {
	case ws.Exited():
		e.Exited = true
		e.ExitCode = int32(ws.ExitStatus())
		e.Status = fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		e.Status = "signal: " + ws.Signal().String()
	default:
		e.Status = fmt.Sprintf("wait status %d", int(ws))
	}
	if !(e.Exited && e.ExitCode == 0) {
		msg := e.Status
		e.Error = &msg
	}
	return e
}

// writeInput writes to the PTY or to stdin.
func (p *proc) writeInput(in *pb.ProcessInput) error {
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Pty:
		if p.pty == nil {
			return errdefs.Classf(errdefs.ErrInvalid, "process %d has no pty", p.pid)
		}
		_, err := p.pty.Write(v.Pty)
		return inputErr(p.pid, err)
	case *pb.ProcessInput_Stdin:
		p.inMu.Lock()
		defer p.inMu.Unlock()
		if p.stdin == nil {
			if p.pty != nil {
				_, err := p.pty.Write(v.Stdin)
				return inputErr(p.pid, err)
			}
			return errdefs.Classf(errdefs.ErrConflict, "process %d: stdin is closed or was not requested", p.pid)
		}
		_, err := p.stdin.Write(v.Stdin)
		return inputErr(p.pid, err)
	default:
		return errdefs.Classf(errdefs.ErrInvalid, "process %d: empty input", p.pid)
	}
}

func inputErr(pid uint32, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrClosed) || errors.Is(err, unix.EPIPE) || errors.Is(err, unix.EIO) {
		return errdefs.Classf(errdefs.ErrConflict, "process %d: input closed", pid)
	}
	return fmt.Errorf("process %d: write input: %w", pid, err)
}

func (p *proc) closeStdin() {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
}

// signal delivers sig to the process's group: the whole tree it started,
// unless a descendant left the group, and also after the process itself
// ended while processes it started live on (a fork bomb's leader exits at
// once; its processes keep the group). The pid of an ended process names
// its group only while no process has that pid: the kernel gives no new
// process the number of a group that still has members, so a live process
// with the pid means the group is gone and the number was reused.
func (p *proc) signal(sig unix.Signal) error {
	ended := p.ended()
	if ended && unix.Kill(int(p.pid), 0) == nil {
		return p.notFound()
	}
	err := signalGroup(int(p.pid), sig)
	if errors.Is(err, unix.ESRCH) && !ended {
		err = unix.Kill(int(p.pid), sig)
	}
	if errors.Is(err, unix.ESRCH) {
		return p.notFound()
	}
	return err
}

// groupAlive reports whether the group of the ended process p still has
// members (see signal).
func (p *proc) groupAlive() bool {
	if unix.Kill(int(p.pid), 0) == nil {
		return false // the number was reused: the group is gone
	}
	err := unix.Kill(-int(p.pid), 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

func (p *proc) notFound() error {
	return errdefs.Classf(errdefs.ErrNotFound, "process with pid %d not found", p.pid)
}

func (p *proc) resize(size *pb.PTY_Size) error {
	if p.pty == nil {
		return errdefs.Classf(errdefs.ErrInvalid, "process %d has no pty", p.pid)
	}
	if size == nil {
		return errdefs.Classf(errdefs.ErrInvalid, "process %d: pty size missing", p.pid)
	}
	return pty.Setsize(p.pty, &pty.Winsize{Cols: uint16(size.GetCols()), Rows: uint16(size.GetRows())})
}

func (p *proc) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
