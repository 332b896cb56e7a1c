//go:build !linux

package identity

import (
	"os"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// envd runs inside Linux sandboxes only; elsewhere (a warren binary built
// for another platform links this package) file access is unsupported.

var errUnsupported = errdefs.Classf(errdefs.ErrUnsupported, "envd file access")

// CheckAccess is unsupported off Linux.
func (u *User) CheckAccess(string, Access) error { return errUnsupported }

// Open is unsupported off Linux.
func (u *User) Open(string, int, Access) (*os.File, error) { return nil, errUnsupported }

// OpenDirAll is unsupported off Linux.
func (u *User) OpenDirAll(string) (*os.File, bool, error) { return nil, false, errUnsupported }

// MkdirAll is unsupported off Linux.
func (u *User) MkdirAll(string) (bool, error) { return false, errUnsupported }

// Mkdir is unsupported off Linux.
func (u *User) Mkdir(string) error { return errUnsupported }

// CreateFile is unsupported off Linux.
func (u *User) CreateFile(string) (*os.File, error) { return nil, errUnsupported }
