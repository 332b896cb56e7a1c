package oci

import (
	"context"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
)

// waitDelay bounds how long an exec waits for its output pipes after the
// runtime's process exited (a background process inside may hold them).
const waitDelay = 2 * time.Second

// Watch holds the outcome of one sandbox's init: it is finished once, by
// whatever observes the exit, and waited on by any number of callers.
type Watch struct {
	once sync.Once
	done chan struct{}
	exit driver.Exit
	err  error
}

// NewWatch returns an unfinished watch.
func NewWatch() *Watch { return &Watch{done: make(chan struct{})} }

// Finish records the outcome; later calls are ignored.
func (w *Watch) Finish(e driver.Exit, err error) {
	w.once.Do(func() {
		if e.At.IsZero() {
			e.At = time.Now()
		}
		w.exit, w.err = e, err
		close(w.done)
	})
}

// Done is closed once the outcome is known.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Finished reports whether the outcome is known.
func (w *Watch) Finished() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the outcome is known or ctx ends.
func (w *Watch) Wait(ctx context.Context) (driver.Exit, error) {
	select {
	case <-w.done:
		return w.exit, w.err
	case <-ctx.Done():
		return driver.Exit{}, ctx.Err()
	}
}

// ExitFromCode builds an Exit from a shell-style code (128+n for signal n).
func ExitFromCode(code int) driver.Exit {
	return driver.Exit{Code: code, Signaled: code > 128 && code <= 128+64}
}
