package builder

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/layer"
)

// account is a user of a root filesystem.
type account struct {
	Name     string
	UID, GID int
	Home     string
}

// readPasswd parses root's /etc/passwd (missing file: no users).
func readPasswd(root string) ([]account, error) {
	return readColonFile(root, "etc/passwd", func(f []string) (account, bool) {
		if len(f) < 6 {
			return account{}, false
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			return account{}, false
		}
		return account{Name: f[0], UID: uid, GID: gid, Home: f[5]}, true
	})
}

type group struct {
	Name string
	GID  int
}

func readGroups(root string) ([]group, error) {
	return readColonFile(root, "etc/group", func(f []string) (group, bool) {
		if len(f) < 3 {
			return group{}, false
		}
		gid, err := strconv.Atoi(f[2])
		if err != nil {
			return group{}, false
		}
		return group{Name: f[0], GID: gid}, true
	})
}

func readColonFile[T any](root, rel string, parse func([]string) (T, bool)) ([]T, error) {
	p, err := layer.ResolveInRoot(root, rel)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if v, ok := parse(strings.Split(line, ":")); ok {
			out = append(out, v)
		}
	}
	return out, sc.Err()
}

// lookupUser resolves a Dockerfile user spec ("name", "uid", "name:group",
// "uid:gid") in root.
func lookupUser(root, spec string) (account, error) {
	if spec == "" {
		spec = "root"
	}
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	users, err := readPasswd(root)
	if err != nil {
		return account{}, err
	}
	var a account
	found := false
	if uid, err := strconv.Atoi(userPart); err == nil {
		a = account{Name: userPart, UID: uid, GID: uid, Home: "/"}
		for _, u := range users {
			if u.UID == uid {
				a, found = u, true
				break
			}
		}
		found = true
	} else {
		for _, u := range users {
			if u.Name == userPart {
				a, found = u, true
				break
			}
		}
	}
	if !found {
		return account{}, fmt.Errorf("user %q does not exist in the image: %w", userPart, errdefs.ErrInvalid)
	}
	if hasGroup {
		if gid, err := strconv.Atoi(groupPart); err == nil {
			a.GID = gid
		} else {
			groups, err := readGroups(root)
			if err != nil {
				return account{}, err
			}
			ok := false
			for _, g := range groups {
				if g.Name == groupPart {
					a.GID, ok = g.GID, true
					break
				}
			}
			if !ok {
				return account{}, fmt.Errorf("group %q does not exist in the image: %w", groupPart, errdefs.ErrInvalid)
			}
		}
	}
	return a, nil
}

// ensureUser returns the user named by spec, creating it when missing (a
// name, not a number): a group of the same name, a home directory under
// /home, bash as its shell when the image has it. sudo grants it
// passwordless sudo when the image has /etc/sudoers.d.
func ensureUser(root, spec string, sudo bool) (account, error) {
	if a, err := lookupUser(root, spec); err == nil {
		return a, nil
	} else if !errdefs.IsInvalid(err) {
		return account{}, err
	}
	name, _, _ := strings.Cut(spec, ":")
	if _, err := strconv.Atoi(name); err == nil || !validUserName(name) {
		return account{}, fmt.Errorf("user %q: not a valid user name to create: %w", name, errdefs.ErrInvalid)
	}
	users, err := readPasswd(root)
	if err != nil {
		return account{}, err
	}
	groups, err := readGroups(root)
	if err != nil {
		return account{}, err
	}
	uid := 1000
	for _, u := range users {
		if u.UID >= uid && u.UID < 60000 {
			uid = u.UID + 1
		}
	}
	gid := uid
	for taken := true; taken; {
		taken = false
		for _, g := range groups {
			if g.GID == gid {
				gid++
				taken = true
			}
		}
	}
	shell := "/bin/sh"
	if p, err := layer.ResolveInRoot(root, "bin/bash"); err == nil {
		if _, err := os.Stat(p); err == nil {
			shell = "/bin/bash"
		}
	}
	home := "/home/" + name
	if err := appendLine(root, "etc/passwd", fmt.Sprintf("%s:x:%d:%d::%s:%s", name, uid, gid, home, shell), 0o644); err != nil {
		return account{}, err
	}
	if err := appendLine(root, "etc/group", fmt.Sprintf("%s:x:%d:", name, gid), 0o644); err != nil {
		return account{}, err
	}
	if p, err := layer.ResolveInRoot(root, "etc/shadow"); err == nil {
		if _, err := os.Stat(p); err == nil {
			if err := appendLine(root, "etc/shadow", name+":!:19000:0:99999:7:::", 0o640); err != nil {
				return account{}, err
			}
		}
	}
	if err := mkdirAllOwned(root, home, uid, gid); err != nil {
		return account{}, err
	}
	if sudo {
		if d, err := layer.ResolveInRoot(root, "etc/sudoers.d"); err == nil {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				f := filepath.Join(d, name)
				if err := os.WriteFile(f, []byte(name+" ALL=(ALL:ALL) NOPASSWD: ALL\n"), 0o440); err != nil {
					return account{}, err
				}
			}
		}
	}
	return account{Name: name, UID: uid, GID: gid, Home: home}, nil
}

func validUserName(s string) bool {
	if s == "" || len(s) > 32 || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func appendLine(root, rel, line string, mode os.FileMode) error {
	p, err := layer.ResolveInRoot(root, rel)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		line = "\n" + line
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// mkdirAllOwned creates dir (absolute, inside root) and its missing
// parents, the new ones owned by uid:gid.
func mkdirAllOwned(root, dir string, uid, gid int) error {
	parts := strings.Split(strings.Trim(filepath.Clean(dir), "/"), "/")
	cur := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		cur += "/" + p
		hp, err := layer.ResolveInRoot(root, cur)
		if err != nil {
			return err
		}
		fi, err := os.Stat(hp)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s exists and is not a directory: %w", cur, errdefs.ErrInvalid)
			}
			continue
		}
		// MkdirAll: through a dangling link the target's parents may be
		// missing too (hp is resolved inside root, links and all).
		if err := os.MkdirAll(hp, 0o755); err != nil {
			return err
		}
		if err := os.Lchown(hp, uid, gid); err != nil {
			return err
		}
	}
	return nil
}
