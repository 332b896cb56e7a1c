//go:build !linux

package process

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func signalUser(uid uint32, sig unix.Signal) error {
	return fmt.Errorf("signal the processes of uid %d: needs Linux: %w", uid, errdefs.ErrUnsupported)
}
