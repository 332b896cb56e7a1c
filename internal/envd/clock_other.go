//go:build !linux

package envd

import (
	"fmt"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func syncClock(time.Time) error { return fmt.Errorf("set clock: %w", errdefs.ErrUnsupported) }
