package rootfs

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// unpackLocks serialises Unpack calls for the same destination inside this
// process; a file lock does the same across processes.
var (
	unpackMu    sync.Mutex
	unpackLocks = map[string]chan struct{}{}
)

func lockDest(ctx context.Context, dest string) (func(), error) {
	for {
		unpackMu.Lock()
		ch, busy := unpackLocks[dest]
		if !busy {
			ch = make(chan struct{})
			unpackLocks[dest] = ch
			unpackMu.Unlock()
			return func() {
				unpackMu.Lock()
				delete(unpackLocks, dest)
				unpackMu.Unlock()
				close(ch)
			}, nil
		}
		unpackMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("unpack %s: waiting for another unpack: %w", dest, ctx.Err())
		}
	}
}

// Unpack extracts the root filesystem tar at tarPath (uncompressed) into
// dest, once: if dest exists it is taken as complete. The tree is written
// to a temporary sibling and renamed into place, so dest never holds a
// partial tree; concurrent callers for the same dest (in this process or
// another) wait for the first one. Owners are kept numerically, with modes,
// times, extended attributes, device nodes, FIFOs, symlinks and hard links.
// No entry can write outside dest: paths are resolved inside it and never
// through a symlink that leaves it.
func Unpack(ctx context.Context, tarPath, dest string) error {
	if !filepath.IsAbs(dest) {
		return fmt.Errorf("unpack %s: destination not absolute: %w", dest, errdefs.ErrInvalid)
	}
	dest = filepath.Clean(dest)
	if _, err := os.Stat(dest); err == nil {
		return nil
	}
	unlock, err := lockDest(ctx, dest)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return fmt.Errorf("unpack %s: %w", dest, errors.Join(errdefs.ErrUnavailable, err))
	}
	lf, err := os.OpenFile(dest+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("unpack %s: lock: %w", dest, errors.Join(errdefs.ErrUnavailable, err))
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("unpack %s: lock: %w", dest, errors.Join(errdefs.ErrUnavailable, err))
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	if _, err := os.Stat(dest); err == nil {
		return nil // another process finished it while we waited
	}
	// Remove what an interrupted earlier unpack left.
	if olds, _ := filepath.Glob(dest + ".tmp-*"); len(olds) > 0 {
		for _, o := range olds {
			_ = os.RemoveAll(o)
		}
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), filepath.Base(dest)+".tmp-")
	if err != nil {
		return fmt.Errorf("unpack %s: %w", dest, errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := extractFile(ctx, tarPath, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("unpack %s into %s: %w", tarPath, dest, err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("unpack %s: %w", dest, errors.Join(errdefs.ErrUnavailable, err))
	}
	return nil
}

func extractFile(ctx context.Context, tarPath, dir string) error {
	f, err := os.Open(tarPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return errors.Join(errdefs.ErrNotFound, err)
		}
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	defer f.Close()
	r, err := decompress(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return err
	}
	return Extract(ctx, r, dir)
}

// decompress recognises a gzip stream by its magic number; anything else is
// read as a plain tar.
func decompress(br *bufio.Reader) (io.Reader, error) {
	magic, err := br.Peek(2)
	if err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", errors.Join(errdefs.ErrInvalid, err))
		}
		return zr, nil
	}
	return br, nil
}

// Extract writes the tar stream r into the existing directory dir with the
// guarantees described at Unpack (without the atomic rename).
func Extract(ctx context.Context, r io.Reader, dir string) error {
	return extract(ctx, r, dir, false)
}

// ExtractLayer applies one OCI image layer (a tar stream) on top of the
// tree in dir, as Extract does, and honours the layer's whiteouts: an entry
// ".wh.<name>" removes <name>, and ".wh..wh..opq" empties its directory of
// what earlier layers put there. Apply the layers of an image in order.
func ExtractLayer(ctx context.Context, r io.Reader, dir string) error {
	return extract(ctx, r, dir, true)
}

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

func extract(ctx context.Context, r io.Reader, dir string, whiteouts bool) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	defer root.Close()
	x := &extractor{root: root, whiteouts: whiteouts, fresh: map[string]bool{}}
	tr := tar.NewReader(r)
	for n := 0; ; n++ {
		if n%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", errors.Join(errdefs.ErrInvalid, err))
		}
		if err := x.entry(hdr, tr); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	return x.finishDirs()
}

type dirTimes struct {
	name  string
	mtime time.Time
	atime time.Time
}

type extractor struct {
	root      *os.Root
	dirs      []dirTimes
	whiteouts bool
	fresh     map[string]bool // paths written by this layer (ExtractLayer)
}

// whiteout applies a whiteout entry; it reports false for other entries.
func (x *extractor) whiteout(name string) (bool, error) {
	parent, base := path.Split(name)
	parent = strings.TrimSuffix(parent, "/")
	if parent == "" {
		parent = "."
	}
	switch {
	case base == whiteoutOpaque:
		ents, err := fs.ReadDir(x.root.FS(), parent)
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
		if err != nil {
			return true, err
		}
		for _, e := range ents {
			child := path.Join(parent, e.Name())
			if !x.fresh[child] {
				if err := x.root.RemoveAll(child); err != nil {
					return true, err
				}
			}
		}
		return true, nil
	case strings.HasPrefix(base, whiteoutPrefix):
		target := path.Join(parent, strings.TrimPrefix(base, whiteoutPrefix))
		if err := x.root.RemoveAll(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return true, err
		}
		return true, nil
	}
	return false, nil
}

// cleanName turns a tar path into a path relative to the root; "" is the
// root itself.
func cleanName(name string) (string, error) {
	n := path.Clean("/" + strings.TrimPrefix(name, "./"))
	n = strings.TrimPrefix(n, "/")
	if n == "" || n == "." {
		return "", nil
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", fmt.Errorf("path %q escapes: %w", name, errdefs.ErrInvalid)
		}
	}
	return n, nil
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if x.whiteouts && name != "" {
		if done, err := x.whiteout(name); done || err != nil {
			return err
		}
		x.fresh[name] = true
	}
	mode := hdr.FileInfo().Mode()
	if name == "" {
		if hdr.Typeflag == tar.TypeDir {
			return x.meta(".", hdr, mode)
		}
		return nil
	}
	if parent := path.Dir(name); parent != "." {
		if err := x.root.MkdirAll(parent, 0o755); err != nil {
			return err
		}
	}
	// Replace what an earlier entry put at this path, except a directory
	// that stays a directory.
	if st, err := x.root.Lstat(name); err == nil {
		if !(st.IsDir() && hdr.Typeflag == tar.TypeDir) {
			if err := x.root.RemoveAll(name); err != nil {
				return err
			}
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg
		f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if err == nil {
			err = f.Chown(hdr.Uid, hdr.Gid)
		}
		if err == nil {
			err = f.Chmod(mode)
		}
		if err == nil {
			err = setXattrsFd(int(f.Fd()), hdr)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		return x.root.Chtimes(name, accessTime(hdr), hdr.ModTime)
	case tar.TypeSymlink:
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		if err := x.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		return x.atParent(name, func(dirfd int, base string) error {
			ts := []unix.Timespec{unix.NsecToTimespec(accessTime(hdr).UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
			return unix.UtimesNanoAt(dirfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
		})
	case tar.TypeLink:
		target, err := cleanName(hdr.Linkname)
		if err != nil || target == "" {
			return fmt.Errorf("hard link to %q: %w", hdr.Linkname, errdefs.ErrInvalid)
		}
		return x.root.Link(target, name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := uint32(unix.S_IFIFO)
		switch hdr.Typeflag {
		case tar.TypeChar:
			kind = unix.S_IFCHR
		case tar.TypeBlock:
			kind = unix.S_IFBLK
		}
		dev := int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
		if err := x.atParent(name, func(dirfd int, base string) error {
			return unix.Mknodat(dirfd, base, kind|0o600, dev)
		}); err != nil {
			return err
		}
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return fmt.Errorf("type %q: %w", hdr.Typeflag, errdefs.ErrUnsupported)
	}
	return x.meta(name, hdr, mode)
}

// meta applies owner, mode and xattrs to a directory or special file; a
// directory's times are applied at the end, after its children changed it.
func (x *extractor) meta(name string, hdr *tar.Header, mode fs.FileMode) error {
	if err := x.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if err := x.root.Chmod(name, mode); err != nil {
		return err
	}
	if err := x.atParent(name, func(dirfd int, base string) error {
		return setXattrsPath(fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, base), hdr)
	}); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeDir {
		x.dirs = append(x.dirs, dirTimes{name: name, mtime: hdr.ModTime, atime: accessTime(hdr)})
		return nil
	}
	return x.root.Chtimes(name, accessTime(hdr), hdr.ModTime)
}

func (x *extractor) finishDirs() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.root.Chtimes(d.name, d.atime, d.mtime); err != nil {
			return fmt.Errorf("times of %q: %w", d.name, err)
		}
	}
	return nil
}

// atParent calls fn with an open descriptor of name's parent directory,
// resolved inside the root, and name's last element.
func (x *extractor) atParent(name string, fn func(dirfd int, base string) error) error {
	parent, base := path.Split(name)
	if name == "." {
		parent, base = ".", "."
	}
	if parent == "" {
		parent = "."
	}
	d, err := x.root.Open(parent)
	if err != nil {
		return err
	}
	defer d.Close()
	return fn(int(d.Fd()), base)
}

func accessTime(hdr *tar.Header) time.Time {
	if hdr.AccessTime.IsZero() {
		return hdr.ModTime
	}
	return hdr.AccessTime
}

const xattrPrefix = "SCHILY.xattr."

func xattrs(hdr *tar.Header) map[string]string {
	var out map[string]string
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, xattrPrefix); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = v
		}
	}
	return out
}

func setXattrsFd(fd int, hdr *tar.Header) error {
	for k, v := range xattrs(hdr) {
		if err := unix.Fsetxattr(fd, k, []byte(v), 0); err != nil {
			return fmt.Errorf("xattr %s: %w", k, err)
		}
	}
	return nil
}

func setXattrsPath(p string, hdr *tar.Header) error {
	for k, v := range xattrs(hdr) {
		if err := unix.Lsetxattr(p, k, []byte(v), 0); err != nil {
			return fmt.Errorf("xattr %s: %w", k, err)
		}
	}
	return nil
}
