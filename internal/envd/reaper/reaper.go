// Package reaper waits for the processes envd starts and, when envd is the
// sandbox's init (PID 1), also reaps every orphan that the kernel re-parents
// to it.
//
// Both implementations share one contract: Spawn runs a start function that
// forks a child and returns its pid, and hands back a channel that receives
// the child's wait status exactly once. The PID-1 Reaper waits with
// wait4(-1) and dispatches statuses by pid; it holds a lock across the start
// function so that a child that exits at once can never be reaped before its
// waiter is registered. Direct waits for each child by pid, which leaves the
// other children of the process (a test binary's, say) alone.
package reaper

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// StartFunc forks a child and returns its pid.
type StartFunc func() (pid int, err error)

// Direct waits for each spawned child by its pid.
type Direct struct{}

// Spawn runs start and waits for the child in the background.
func (Direct) Spawn(start StartFunc) (<-chan unix.WaitStatus, error) {
	pid, err := start()
	if err != nil {
		return nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	go func() {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			break
		}
		ch <- ws
	}()
	return ch, nil
}

// Reaper reaps every child of the process; use it when envd is PID 1.
type Reaper struct {
	log     *slog.Logger
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
	reaped  func(pid int) // test hook: called for each orphan reaped
}

// New returns a Reaper; call Run to start reaping.
func New(log *slog.Logger) *Reaper {
	return &Reaper{log: log, waiting: map[int]chan unix.WaitStatus{}}
}

// Spawn runs start under the reaper's lock and registers the child.
func (r *Reaper) Spawn(start StartFunc) (<-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiting[pid] = ch
	return ch, nil
}

// Run reaps children on every SIGCHLD until ctx ends.
func (r *Reaper) Run(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	defer signal.Stop(sig)
	for {
		r.reapAll()
		select {
		case <-ctx.Done():
			return
		case <-sig:
		}
	}
}

func (r *Reaper) reapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- ws
			continue
		}
		r.log.Debug("reaped orphan", "pid", pid, "status", int(ws))
		if r.reaped != nil {
			r.reaped(pid)
		}
	}
}
