package identity

import (
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Access is a set of permission bits to check: read, write, execute/search.
type Access uint32

// The access bits, as in access(2).
const (
	Read    Access = 4
	Write   Access = 2
	Execute Access = 1
)

// ErrPermission is wrapped by the errors of the access checks; it is of the
// forbidden class.
var ErrPermission = errdefs.Classf(errdefs.ErrForbidden, "permission denied")

// grantsBits applies the owner/group/other permission bits of mode.
func (u *User) grantsBits(uid, gid, mode uint32, want Access) bool {
	perm := mode & 0o777
	var bits uint32
	switch {
	case uid == u.UID:
		bits = perm >> 6
	case u.inGroup(gid):
		bits = perm >> 3
	default:
		bits = perm
	}
	return Access(bits&7)&want == want
}

func (u *User) inGroup(gid uint32) bool {
	for _, g := range u.Groups {
		if g == gid {
			return true
		}
	}
	return false
}
