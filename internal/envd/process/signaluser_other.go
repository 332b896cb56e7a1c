//go:build !linux

package process

import (
	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func signalUser(uid uint32, sig unix.Signal) error {
	return errdefs.Classf(errdefs.ErrUnsupported, "signal the processes of uid %d: needs Linux", uid)
}
