package envd

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// clockTolerance is the drift below which the clock is left alone.
const clockTolerance = time.Second

// syncClock sets the system clock to t when it is off by more than
// clockTolerance. Runtimes that own the clock (gVisor) refuse; that is
// reported, not fatal.
func syncClock(t time.Time) error {
	d := time.Since(t)
	if d < clockTolerance && d > -clockTolerance {
		return nil
	}
	tv := unix.NsecToTimeval(t.UnixNano())
	if err := unix.Settimeofday(&tv); err != nil {
		return fmt.Errorf("set clock to %s: %w", t.Format(time.RFC3339), err)
	}
	return nil
}
