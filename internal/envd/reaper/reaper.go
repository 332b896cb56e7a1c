// Package reaper waits for the processes envd starts and, when envd is the
// sandbox's init (PID 1), also reaps every orphan that the kernel re-parents
// to it.
//
// Both implementations share one contract: Spawn runs a start function that
// forks a child and returns its pid, and hands back a channel that receives
// the child's wait status exactly once. The PID-1 Reaper reaps the children
// that have a waiter by pid and the orphans with wait4(-1), and dispatches
// statuses by pid; it holds a lock across the start function so that a
// child that exits at once can never be reaped before its waiter is
// registered. Direct waits for each child by pid, which leaves the other
// children of the process (a test binary's, say) alone.
//
// Under a fork bomb the orphans come in a stream (every backgrounded
// process whose parent exited is re-parented to PID 1), and the order in
// which wait4(-1) hands out zombies is the kernel's: gVisor's is random
// (it walks a Go map), so a waited child could sit behind thousands of
// orphans. Each round of the Reaper therefore reaps the waited children
// first, by pid, then at most orphanBatch orphans, and holds its lock for
// one round only, so that a Spawn waits for a round, never for the
// stream.
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

// orphanBatch is how many orphans one round of the Reaper reaps at most
// before it looks at the waited children again.
const orphanBatch = 16

// waitFunc is wait4 without the resource usage.
type waitFunc func(pid int, ws *unix.WaitStatus, options int) (int, error)

func wait4(pid int, ws *unix.WaitStatus, options int) (int, error) {
	return unix.Wait4(pid, ws, options, nil)
}

// Reaper reaps every child of the process; use it when envd is PID 1.
type Reaper struct {
	log     *slog.Logger
	wait    waitFunc // wait4; tests replace it
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
	reaped  func(pid int) // test hook: called for each orphan reaped
}

// New returns a Reaper; call Run to start reaping.
func New(log *slog.Logger) *Reaper {
	return &Reaper{log: log, wait: wait4, waiting: map[int]chan unix.WaitStatus{}}
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

// reapAll reaps, round by round, until no child has exited.
func (r *Reaper) reapAll() {
	for r.reapRound() {
	}
}

// reapRound reaps the waited children that have exited, then up to
// orphanBatch other children; it reports whether more may be waiting.
func (r *Reaper) reapRound() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid, ch := range r.waiting {
		var ws unix.WaitStatus
		if got, err := r.waitNoHang(pid, &ws); err == nil && got == pid {
			delete(r.waiting, pid)
			ch <- ws
		}
	}
	for range orphanBatch {
		var ws unix.WaitStatus
		pid, err := r.waitNoHang(-1, &ws)
		if err != nil || pid <= 0 {
			return false
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
	return true
}

// waitNoHang is wait4(pid, WNOHANG), retried on EINTR.
func (r *Reaper) waitNoHang(pid int, ws *unix.WaitStatus) (int, error) {
	for {
		got, err := r.wait(pid, ws, unix.WNOHANG)
		if !errors.Is(err, unix.EINTR) {
			return got, err
		}
	}
}
