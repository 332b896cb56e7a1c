package node

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// spawner runs calls on a few OS threads that do not exit while the agent
// runs. Runtime drivers start long-lived helper processes (`runsc wait`)
// with a parent-death signal, which Linux ties to the creating thread, not
// the process; and a goroutine that ends while locked to its thread (as
// network namespace code does) ends that thread. A helper started from an
// ordinary goroutine can therefore be killed at any time, and its sandbox
// reported as exited. The agent calls the driver's Start and Restore (and
// its first look at an adopted sandbox) through the spawner, whose threads
// live until Close. See golang/go#27505.
type spawner struct {
	work chan func()
	wg   sync.WaitGroup
	// mu is held shared by do and exclusively by close, so that no call
	// is sent once the spawner is closed.
	mu     sync.RWMutex
	closed bool
}

func newSpawner(n int) *spawner {
	s := &spawner{work: make(chan func())}
	for range n {
		s.wg.Go(func() {
			runtime.LockOSThread()
			// Unlocked on the way out: the thread goes back to the pool
			// instead of ending (and killing what it started).
			defer runtime.UnlockOSThread()
			for f := range s.work {
				f()
			}
		})
	}
	return s
}

// do runs f on one of the spawner's threads and returns when it is done;
// once the spawner is closed it fails without running f.
func (s *spawner) do(f func()) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("node agent closed: %w", errdefs.ErrUnavailable)
	}
	done := make(chan struct{})
	s.work <- func() {
		defer close(done)
		f()
	}
	<-done
	return nil
}

// close waits for the calls in flight and stops the spawner's goroutines.
func (s *spawner) close() {
	s.stop()
	s.wg.Wait()
}

// stop refuses further calls, once the calls in flight are done, and ends
// the work channel.
func (s *spawner) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.work)
	}
}
