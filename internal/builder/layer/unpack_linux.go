package layer

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// OCI whiteout markers (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// Unpack extracts the tar stream r into dir, which must exist. Entries can
// not escape dir: ".." is clamped at dir and symbolic links met on the way
// to an entry are resolved inside dir, never on the host. OCI whiteouts
// (".wh.NAME", ".wh..wh..opq") delete what lies below them, so that layers
// can be unpacked one over the other. Ownership, modes, times and extended
// attributes are kept (ownership only when running as root). progress, when
// set, receives the number of bytes of file content written so far.
func Unpack(ctx context.Context, r io.Reader, dir string, progress func(written int64)) error {
	root, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("unpack into %q: %w", dir, err)
	}
	tr := tar.NewReader(r)
	asRoot := os.Geteuid() == 0
	type dirMeta struct {
		path string
		hdr  *tar.Header
	}
	var dirs []dirMeta
	var written int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("unpack into %q: read tar: %w: %w", dir, err, errdefs.ErrInvalid)
		}
		rel := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if rel == "" {
			continue // the root itself keeps the mode of dir
		}
		parentRel, base := path.Split(rel)
		parent, err := ResolveInRoot(root, parentRel)
		if err != nil {
			return fmt.Errorf("unpack %q: %w", hdr.Name, err)
		}
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return fmt.Errorf("unpack %q: %w", hdr.Name, err)
		}
		if base == whiteoutOpaque {
			if err := removeChildren(parent); err != nil {
				return fmt.Errorf("unpack %q: %w", hdr.Name, err)
			}
			continue
		}
		if strings.HasPrefix(base, whiteoutPrefix) {
			if err := os.RemoveAll(filepath.Join(parent, strings.TrimPrefix(base, whiteoutPrefix))); err != nil {
				return fmt.Errorf("unpack %q: %w", hdr.Name, err)
			}
			continue
		}
		target := filepath.Join(parent, base)
		if fi, err := os.Lstat(target); err == nil {
			if !(fi.IsDir() && hdr.Typeflag == tar.TypeDir) {
				if err := os.RemoveAll(target); err != nil {
					return fmt.Errorf("unpack %q: %w", hdr.Name, err)
				}
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("unpack %q: %w", hdr.Name, err)
			}
			dirs = append(dirs, dirMeta{target, hdr})
		case tar.TypeReg, tar.TypeRegA:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return fmt.Errorf("unpack %q: %w", hdr.Name, err)
			}
			n, err := io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("unpack %q: %w", hdr.Name, err)
			}
			written += n
			if progress != nil {
				progress(written)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return fmt.Errorf("unpack %q: %w", hdr.Name, err)
			}
		case tar.TypeLink:
			srcRel := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
			sp, sb := path.Split(srcRel)
			srcParent, err := ResolveInRoot(root, sp)
			if err != nil {
				return fmt.Errorf("unpack %q: %w", hdr.Name, err)
			}
			if err := os.Link(filepath.Join(srcParent, sb), target); err != nil {
				return fmt.Errorf("unpack %q: hard link: %w", hdr.Name, err)
			}
			continue // a hard link shares the metadata of its source
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			mode := uint32(hdr.Mode & 0o7777)
			switch hdr.Typeflag {
			case tar.TypeChar:
				mode |= unix.S_IFCHR
			case tar.TypeBlock:
				mode |= unix.S_IFBLK
			default:
				mode |= unix.S_IFIFO
			}
			dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
			if err := unix.Mknod(target, mode, int(dev)); err != nil {
				if errors.Is(err, unix.EPERM) {
					continue // unprivileged: device nodes come from the runtime anyway
				}
				return fmt.Errorf("unpack %q: mknod: %w", hdr.Name, err)
			}
		case tar.TypeXGlobalHeader:
			continue
		default:
			continue // unknown entry kinds are skipped
		}
		if err := applyMeta(target, hdr, asRoot); err != nil {
			return fmt.Errorf("unpack %q: %w", hdr.Name, err)
		}
	}
	// Directory times last: creating children changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := applyMeta(dirs[i].path, dirs[i].hdr, asRoot); err != nil {
			return fmt.Errorf("unpack %q: %w", dirs[i].hdr.Name, err)
		}
	}
	return nil
}

func applyMeta(target string, hdr *tar.Header, asRoot bool) error {
	if asRoot {
		if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			err := unix.Lsetxattr(target, name, []byte(v), 0)
			if err != nil && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EPERM) {
				return fmt.Errorf("xattr %s: %w", name, err)
			}
		}
	}
	if hdr.Typeflag != tar.TypeSymlink {
		// After chown, which clears set-id bits.
		if err := unix.Chmod(target, uint32(hdr.Mode&0o7777)); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.AccessTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if hdr.AccessTime.IsZero() {
		ts[0] = ts[1]
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW)
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
