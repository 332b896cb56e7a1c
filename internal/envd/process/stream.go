package process

import (
	"context"
	"errors"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/internal/errdefs/errconnect"
)

// defaultKeepalive is the keepalive period when the client asks for none.
const defaultKeepalive = 90 * time.Second

// keepaliveInterval reads the Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h interface{ Get(string) string }) time.Duration {
	if v, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return defaultKeepalive
}

// Start starts a process and streams its events.
func (s *Service) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	o, err := s.resolve(req.Header(), req.Msg)
	if err != nil {
		return errconnect.From(err)
	}
	p, sub, err := s.mgr.start(o)
	if err != nil {
		return errconnect.From(err)
	}
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.StartResponse{Event: ev}) }
	err = follow(ctx, p, sub, keepaliveInterval(req.Header()), send)
	if timedOut(ctx) {
		// The request's Connect-Timeout-Ms expired: the process dies with it.
		_ = p.signal(unix.SIGKILL)
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("process timed out and was killed"))
	}
	return err
}

// Connect attaches to a running process (or replays the end of a recently
// ended one) and streams its events from now on.
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := s.mgr.selectProc(req.Msg.GetProcess())
	if err != nil {
		return errconnect.From(err)
	}
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.ConnectResponse{Event: ev}) }
	sub, end := p.subscribe()
	if sub == nil {
		if err := send(startEvent(p.pid)); err != nil {
			return err
		}
		return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}})
	}
	return follow(ctx, p, sub, keepaliveInterval(req.Header()), send)
}

// deadlineSlack is how close to its deadline a Start stream may be cut for
// the cut to count as the timeout: the client enforces the same deadline
// and, having sent it first, usually hangs up a moment before ours fires.
const deadlineSlack = 500 * time.Millisecond

// timedOut reports whether ctx ended because of its deadline.
func timedOut(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && ctx.Err() != nil && time.Until(dl) < deadlineSlack
}

func startEvent(pid uint32) *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}
}

// follow sends the start event, the data events of sub, keepalives while
// idle, and the end event. It returns early, leaving the process running,
// when ctx ends (client gone) or a send fails.
func follow(ctx context.Context, p *proc, sub *subscriber, keepalive time.Duration, send func(*pb.ProcessEvent) error) error {
	defer p.unsubscribe(sub)
	if err := send(startEvent(p.pid)); err != nil {
		return err
	}
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	for {
		select {
		case ev := <-sub.ch:
			if err := send(ev); err != nil {
				return err
			}
		case <-p.done:
			for {
				select {
				case ev := <-sub.ch:
					if err := send(ev); err != nil {
						return err
					}
					continue
				default:
				}
				break
			}
			return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: p.end}})
		case <-tick.C:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
