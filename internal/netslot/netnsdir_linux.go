package netslot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/mountinfo"
)

// A namespace is kept alive by a bind mount of its nsfs file onto a file in
// a directory. When that directory is a plain directory (not a mount point)
// and some other tool later makes it a mount point of its own, as
// `ip netns add` does to /run/netns (a recursive bind of the directory onto
// itself), the namespaces mounted before sit on the lower mount: the copy
// in the new mount can be unmounted, but the original stays, hidden, and
// its file cannot be removed (EBUSY). prepareNetNSDir avoids that for the
// pool's own directory; deleteNetNS and the legacy reclaim uncover what was
// hidden anyway.

// prepareNetNSDir creates dir and makes it a mount point of its own with
// shared propagation, as iproute2 does for /run/netns, before the first
// namespace is mounted in it: later binds of the directory then copy its
// namespaces instead of hiding them, and an unmount in one mount namespace
// reaches the others.
func prepareNetNSDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("netns dir %s: %w", dir, err)
	}
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("netns dir %s: make shared: %w", dir, err)
	}
	// Not a mount point yet.
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("netns dir %s: bind onto itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("netns dir %s: make shared: %w", dir, err)
	}
	return nil
}

// removeNetNSDir unmounts and removes a pool's namespace directory and its
// parent when empty. Namespaces still mounted in it are detached with it.
func removeNetNSDir(dir string) error {
	// Every mount stacked on it (its own, and any a tool put above).
	for range 16 {
		err := unix.Unmount(dir, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		if err != nil {
			return fmt.Errorf("unmount netns dir %s: %w", dir, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove netns dir %s: %w", dir, err)
	}
	_ = os.Remove(filepath.Dir(dir)) // the per-table parent, when empty
	return nil
}

// newNamedNetNS creates a network namespace bind-mounted at dir/name. It
// runs on a locked OS thread that is thrown away after, because creating
// the namespace moves the thread into it.
func newNamedNetNS(dir, name string) (netns.NsHandle, error) {
	type result struct {
		h   netns.NsHandle
		err error
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return netns.None(), err
	}
	f.Close()
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{netns.None(), fmt.Errorf("unshare: %w", err)}
			return
		}
		self := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net"
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			ch <- result{netns.None(), fmt.Errorf("bind %s: %w", path, err)}
			return
		}
		h, err := netns.GetFromPath(path)
		ch <- result{h, err}
	}()
	r := <-ch
	if r.err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.Remove(path)
	}
	return r.h, r.err
}

// deleteNetNS unmounts and removes the namespace file dir/name; missing is
// fine. A namespace hidden under a later mount of dir is uncovered and
// removed too (see uncover).
func deleteNetNS(dir, name string) error {
	err := unmountRemove(dir, name)
	if !errors.Is(err, unix.EBUSY) {
		return err
	}
	if cerr := uncover(dir, func() error { return deleteNetNS(dir, name) }); cerr != nil {
		return fmt.Errorf("remove netns %s: hidden under a later mount of %s: %w", name, dir, cerr)
	}
	return nil
}

func unmountRemove(dir, name string) error {
	p := filepath.Join(dir, name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", name, err)
	}
	return nil
}

// hidden reports whether dir/name is a mount point in the mount table that
// path lookups do not reach: a namespace hidden under a later mount of dir.
func hidden(dir, name string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(dir, name), &st); err != nil || st.Type == unix.NSFS_MAGIC {
		return false
	}
	mounts, err := mountinfo.Mounts()
	if err != nil {
		return false
	}
	for _, m := range mounts {
		if m.Point == filepath.Join(dir, name) {
			return true
		}
	}
	return false
}

// uncover runs fn while the mount on dir that path lookups reach is moved
// aside to a temporary directory beside dir, so that what it hides is
// reachable at dir, and moves it back after. The kernel refuses to move a
// mount whose parent mount is shared (then uncover fails, and what is
// hidden stays until the mounts above it go). Namespaces that other tools
// keep in dir are unreachable by path for the moment it takes.
func uncover(dir string, fn func() error) error {
	mounts, err := mountinfo.Mounts()
	if err != nil {
		return err
	}
	covered := false
	for _, m := range mounts {
		covered = covered || m.Point == filepath.Clean(dir)
	}
	if !covered {
		return fmt.Errorf("%s is not a mount point", dir)
	}
	aside, err := os.MkdirTemp(filepath.Dir(dir), ".warren-aside-")
	if err != nil {
		return err
	}
	defer os.Remove(aside)
	if err := unix.Mount(dir, aside, "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the mount on %s aside: %w", dir, err)
	}
	ferr := fn()
	if err := unix.Mount(aside, dir, "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the mount on %s back from %s: %w", dir, aside, err)
	}
	return ferr
}
