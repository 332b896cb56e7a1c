// Package identity resolves the users that envd acts for: their ids, groups
// and home directories, how their paths resolve, and whether they may access
// a path.
//
// Paths: a relative path resolves against the user's home directory (a
// leading "~" is the home too) and every path is cleaned, so ".." is resolved
// lexically. There is no jail: a sandbox belongs to its user, and root may
// touch anything, exactly as in a shell.
//
// Writes (creating files and directories, moving, removing) are made by
// envd as root on the user's behalf, as E2B's envd makes them, and what
// they create belongs to the user (mkdir_linux.go). Reads check the access the
// kernel would grant the user (owner/group/other permission bits of every
// directory searched and of the target, after following symbolic links),
// on the descriptors of the objects actually opened (open_linux.go), so neither
// "..", a symbolic link nor a link swapped mid-check lets a normal user
// read what the user could not read from a shell. These checks are a
// convenience with shell semantics, not a security boundary inside the
// sandbox (the user has sudo): the sandbox itself is the boundary.
package identity

import (
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// User is a resolved local user.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary group ids, including GID
	Home   string
}

// IsRoot reports whether the user is the superuser.
func (u *User) IsRoot() bool { return u.UID == 0 }

// Lookup resolves a user by name from the system's user database.
func Lookup(name string) (*User, error) {
	if name == "" {
		return nil, errdefs.Classf(errdefs.ErrInvalid, "user name: empty")
	}
	uu, err := user.Lookup(name)
	if err != nil {
		return nil, errdefs.Classf(errdefs.ErrNotFound, "user %q", name)
	}
	uid, err := strconv.ParseUint(uu.Uid, 10, 32)
	if err != nil {
		return nil, errdefs.Classf(errdefs.ErrInvalid, "user %q: uid %q", name, uu.Uid)
	}
	gid, err := strconv.ParseUint(uu.Gid, 10, 32)
	if err != nil {
		return nil, errdefs.Classf(errdefs.ErrInvalid, "user %q: gid %q", name, uu.Gid)
	}
	u := &User{Name: uu.Username, UID: uint32(uid), GID: uint32(gid), Home: uu.HomeDir}
	if u.Home == "" {
		u.Home = "/"
	}
	u.Groups = []uint32{u.GID}
	if ids, err := uu.GroupIds(); err == nil {
		for _, s := range ids {
			g, err := strconv.ParseUint(s, 10, 32)
			if err == nil && uint32(g) != u.GID {
				u.Groups = append(u.Groups, uint32(g))
			}
		}
	}
	return u, nil
}

// ResolvePath turns a client path into a clean absolute path: "~" and
// "~/x" expand to the home directory, relative paths resolve against base
// (the home directory when base is empty).
func (u *User) ResolvePath(p, base string) string {
	if base == "" {
		base = u.Home
	}
	switch {
	case p == "~":
		p = u.Home
	case strings.HasPrefix(p, "~/"):
		p = filepath.Join(u.Home, p[2:])
	case !filepath.IsAbs(p):
		p = filepath.Join(base, p)
	}
	return filepath.Clean(p)
}
