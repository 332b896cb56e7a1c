package layer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

const overlayOpaqueXattr = "trusted.overlay.opaque"

// Flatten merges layers (directories, bottom first, each the upper
// directory of an overlay mount or a plain tree) into dst as overlayfs
// would show them: a character device 0/0 deletes the path below it, a
// directory marked opaque hides what lies below it. Regular files are hard
// links to the layers' files where possible (layers are immutable), copies
// otherwise. dst must exist.
func Flatten(ctx context.Context, layers []string, dst string) error {
	for _, l := range layers {
		if err := applyTree(ctx, l, dst); err != nil {
			return fmt.Errorf("flatten layer %q: %w", l, err)
		}
	}
	return nil
}

type pendingDir struct {
	path string
	fi   fs.FileInfo
}

func applyTree(ctx context.Context, src, dst string) error {
	var dirs []pendingDir
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		st := fi.Sys().(*syscall.Stat_t)
		existing, lerr := os.Lstat(target)
		exists := lerr == nil
		switch {
		case fi.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0:
			// overlay whiteout
			if exists {
				return os.RemoveAll(target)
			}
			return nil
		case fi.IsDir():
			if exists && !existing.IsDir() {
				if err := os.RemoveAll(target); err != nil {
					return err
				}
				exists = false
			}
			if exists && isOpaque(p) {
				if err := removeChildren(target); err != nil {
					return err
				}
			}
			if !exists {
				if err := os.Mkdir(target, 0o700); err != nil {
					return err
				}
			}
			dirs = append(dirs, pendingDir{target, fi})
			return nil
		}
		if exists {
			if err := os.RemoveAll(target); err != nil {
				return err
			}
		}
		switch {
		case fi.Mode().IsRegular():
			if err := os.Link(p, target); err != nil {
				if err := copyFile(p, target); err != nil {
					return err
				}
				return copyMeta(p, target, fi)
			}
			return nil // a hard link shares its metadata
		case fi.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		default:
			if err := unix.Mknod(target, st.Mode, int(st.Rdev)); err != nil {
				if errors.Is(err, unix.EPERM) {
					return nil
				}
				return err
			}
		}
		return copyMeta(p, target, fi)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		from := filepath.Join(src, strings.TrimPrefix(dirs[i].path, dst))
		if err := copyMeta(from, dirs[i].path, dirs[i].fi); err != nil {
			return err
		}
	}
	return nil
}

func isOpaque(p string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(p, overlayOpaqueXattr, buf)
	return err == nil && n > 0 && buf[0] == 'y'
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copyMeta copies ownership, mode, times and extended attributes (but
// overlayfs' own) from src to dst.
func copyMeta(src, dst string, fi fs.FileInfo) error {
	st := fi.Sys().(*syscall.Stat_t)
	if os.Geteuid() == 0 {
		if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if err := copyXattrs(src, dst); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.Timespec(st.Atim), unix.Timespec(st.Mtim)}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func copyXattrs(src, dst string) error {
	size, err := unix.Llistxattr(src, nil)
	if err != nil || size == 0 {
		return nil
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(src, buf)
	if err != nil {
		return nil
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" || strings.HasPrefix(name, "trusted.overlay.") {
			continue
		}
		vsize, err := unix.Lgetxattr(src, name, nil)
		if err != nil {
			continue
		}
		val := make([]byte, vsize)
		vsize, err = unix.Lgetxattr(src, name, val)
		if err != nil {
			continue
		}
		if err := unix.Lsetxattr(dst, name, val[:vsize], 0); err != nil &&
			!errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("xattr %s on %q: %w", name, dst, err)
		}
	}
	return nil
}

// Mount is an overlay mount of read-only layers with one writable upper
// directory; what a step writes lands in Upper, which becomes the step's
// layer.
type Mount struct {
	Merged string
	Upper  string
	work   string
}

// MountOverlay mounts lowers (bottom first) with a new empty upper
// directory under scratch, which must exist and be on the same file system
// as the upper directory is to live on. Unmount releases the mount; the
// upper directory stays.
func MountOverlay(lowers []string, scratch string) (*Mount, error) {
	if len(lowers) == 0 {
		return nil, fmt.Errorf("overlay: no lower layer: %w", errdefs.ErrInvalid)
	}
	m := &Mount{
		Merged: filepath.Join(scratch, "merged"),
		Upper:  filepath.Join(scratch, "upper"),
		work:   filepath.Join(scratch, "work"),
	}
	for _, d := range []string{m.Merged, m.Upper, m.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("overlay: %w", err)
		}
	}
	rev := make([]string, len(lowers))
	for i, l := range lowers {
		if strings.ContainsAny(l, ",:") {
			return nil, fmt.Errorf("overlay: layer path %q has a comma or colon: %w", l, errdefs.ErrInvalid)
		}
		rev[len(lowers)-1-i] = l
	}
	opts := "lowerdir=" + strings.Join(rev, ":") + ",upperdir=" + m.Upper + ",workdir=" + m.work +
		",redirect_dir=off,index=off,metacopy=off"
	if len(opts) >= os.Getpagesize()-1 {
		return nil, fmt.Errorf("overlay: %d layers are too many for one mount: %w", len(lowers), errdefs.ErrExhausted)
	}
	if err := unix.Mount("overlay", m.Merged, "overlay", 0, opts); err != nil {
		return nil, fmt.Errorf("overlay mount on %q: %w", m.Merged, err)
	}
	return m, nil
}

// Unmount detaches the overlay and removes its work directory.
func (m *Mount) Unmount() error {
	if err := unix.Unmount(m.Merged, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("overlay unmount %q: %w", m.Merged, err)
	}
	if err := os.RemoveAll(m.work); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	return os.Remove(m.Merged)
}

func removeChildren(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
