package layer

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
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
// not escape dir: every path is resolved by the kernel inside dir
// (openat2 with RESOLVE_IN_ROOT), so ".." and symbolic links, absolute or
// not, stop at dir, and a hard link can only name a file inside dir. OCI
// whiteouts (".wh.NAME", ".wh..wh..opq") delete what lies below them, so
// that layers can be unpacked one over the other; never what the same tar
// wrote (a whiteout hides the layers below its own, wherever in its tar
// it comes). Ownership (when running as root), modes, times and extended
// attributes are kept within the limits of opts.
func Unpack(ctx context.Context, r io.Reader, dir string, opts Options) error {
	rootFd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("unpack into %q: %w", dir, err)
	}
	defer unix.Close(rootFd)
	u := &unpacker{root: rootFd, opts: opts, asRoot: os.Geteuid() == 0, layer: !opts.Untrusted && !opts.Tree}
	if u.layer {
		u.fresh = map[string]struct{}{}
	}
	tr := tar.NewReader(r)
	type dirMeta struct {
		rel string
		hdr *tar.Header
	}
	var dirs []dirMeta
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
		u.entries++
		if opts.MaxEntries > 0 && u.entries > opts.MaxEntries {
			return fmt.Errorf("unpack: more than %d entries (the limit%s): %w", opts.MaxEntries, opts.what(), errdefs.ErrExhausted)
		}
		rel, isDir, err := u.entry(tr, hdr)
		if err != nil {
			return fmt.Errorf("unpack %q: %w", hdr.Name, err)
		}
		if isDir {
			dirs = append(dirs, dirMeta{rel, hdr})
		}
	}
	// Directory times last: creating children changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := u.dirMeta(dirs[i].rel, dirs[i].hdr); err != nil {
			return fmt.Errorf("unpack %q: %w", dirs[i].hdr.Name, err)
		}
	}
	return nil
}

// Options are the limits and policies of an Unpack.
type Options struct {
	// MaxBytes bounds the file content written, MaxEntries the tar
	// entries read (0: no bound). Going past either fails the unpack
	// (errdefs.ErrExhausted): a gzip bomb stops there.
	MaxBytes   int64
	MaxEntries int64
	// What names the limits in errors ("for uploaded build contexts").
	What string
	// Untrusted marks a tar a tenant sent (an uploaded build context):
	// device nodes and FIFOs are skipped, set-user/group-ID bits cleared
	// and extended attributes dropped.
	Untrusted bool
	// Devices creates device nodes (the operator's own base root
	// filesystem tar). Without it they are skipped, as in images: a
	// sandbox's /dev comes from its runtime, and a device node in a tree
	// on the host could only ever serve to read the host's devices.
	Devices bool
	// Progress, when set, receives the bytes of file content written so
	// far.
	Progress func(written int64)
	// Tree marks a tar of a whole tree (a build's artifact), not a layer:
	// ".wh." names are files like any other.
	Tree bool
	// Xattr, when set, is asked of every extended attribute an entry
	// carries (a trusted tar's): one it refuses fails the unpack
	// (errdefs.ErrInvalid). Unset, every one but trusted.* is kept.
	Xattr func(name string) bool
}

func (o Options) what() string {
	if o.What == "" {
		return ""
	}
	return " " + o.What
}

type unpacker struct {
	root    int // O_PATH descriptor of the root
	opts    Options
	asRoot  bool
	written int64
	entries int64
	skipped int64
	// layer is set when whiteouts apply (not an upload, not a whole
	// tree); fresh then holds the paths this tar wrote, which its
	// whiteouts spare.
	layer bool
	fresh map[string]struct{}
}

// entry writes one tar entry; it returns the entry's path and whether it
// is a directory (whose metadata is applied at the end).
func (u *unpacker) entry(tr *tar.Reader, hdr *tar.Header) (string, bool, error) {
	rel := CleanRel(hdr.Name)
	if rel == "." {
		return "", false, nil // the root itself keeps the mode of dir
	}
	parentRel, base := path.Split(rel)
	pfd, err := u.openDir(parentRel, true)
	if err != nil {
		return "", false, err
	}
	defer unix.Close(pfd)
	// Whiteouts are layers' business: in a tenant's upload or a whole
	// tree ".wh." names are files like any other.
	if base == whiteoutOpaque && u.layer {
		parent := CleanRel(parentRel)
		return "", false, removeChildrenAt(pfd, func(name string) bool { return u.wrote(path.Join(parent, name)) })
	}
	if name, ok := strings.CutPrefix(base, whiteoutPrefix); ok && u.layer {
		if u.wrote(path.Join(CleanRel(parentRel), name)) {
			return "", false, nil
		}
		return "", false, removeAt(pfd, name)
	}
	if u.layer {
		u.fresh[rel] = struct{}{}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if !(st.Mode&unix.S_IFMT == unix.S_IFDIR && hdr.Typeflag == tar.TypeDir) {
			if err := removeAt(pfd, base); err != nil {
				return "", false, err
			}
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return "", false, err
		}
		return rel, true, nil
	case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg
		if err := u.file(pfd, base, tr); err != nil {
			return "", false, err
		}
	case tar.TypeSymlink:
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return "", false, err
		}
	case tar.TypeLink:
		srcParent, srcBase := path.Split(CleanRel(hdr.Linkname))
		spfd, err := u.openDir(srcParent, false)
		if err != nil {
			return "", false, fmt.Errorf("hard link to %q: %w", hdr.Linkname, err)
		}
		// No AT_SYMLINK_FOLLOW: a link to a symbolic link links the link.
		err = unix.Linkat(spfd, srcBase, pfd, base, 0)
		unix.Close(spfd)
		if err != nil {
			return "", false, fmt.Errorf("hard link to %q: %w", hdr.Linkname, err)
		}
		return "", false, nil // a hard link shares the metadata of its source
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if ok, err := u.node(pfd, base, hdr); !ok || err != nil {
			return "", false, err
		}
	default:
		return "", false, nil // global headers and unknown entry kinds are skipped
	}
	return "", false, u.meta(pfd, base, hdr)
}

// file writes a regular file's content, within MaxBytes.
func (u *unpacker) file(pfd int, base string, tr io.Reader) error {
	fd, err := unix.Openat(pfd, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), base)
	src := tr
	if u.opts.MaxBytes > 0 {
		src = io.LimitReader(tr, u.opts.MaxBytes-u.written+1)
	}
	n, err := io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	u.written += n
	if err != nil {
		return err
	}
	if u.opts.MaxBytes > 0 && u.written > u.opts.MaxBytes {
		return fmt.Errorf("more than %d bytes of file content (the limit%s): %w", u.opts.MaxBytes, u.opts.what(), errdefs.ErrExhausted)
	}
	if u.opts.Progress != nil {
		u.opts.Progress(u.written)
	}
	return nil
}

// node makes a device node or FIFO where the options allow; ok is false
// when it was skipped.
func (u *unpacker) node(pfd int, base string, hdr *tar.Header) (ok bool, err error) {
	mode := uint32(hdr.Mode & 0o777)
	switch {
	case hdr.Typeflag == tar.TypeFifo && !u.opts.Untrusted:
		mode |= unix.S_IFIFO
	case hdr.Typeflag == tar.TypeChar && u.opts.Devices:
		mode |= unix.S_IFCHR
	case hdr.Typeflag == tar.TypeBlock && u.opts.Devices:
		mode |= unix.S_IFBLK
	default:
		u.skipped++
		return false, nil
	}
	dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
	if err := unix.Mknodat(pfd, base, mode, int(dev)); err != nil {
		if errors.Is(err, unix.EPERM) {
			return false, nil // unprivileged: device nodes come from the runtime anyway
		}
		return false, fmt.Errorf("mknod: %w", err)
	}
	return true, nil
}

// openDir opens the directory rel of the root, resolved by the kernel
// inside the root, creating missing directories when create is set (also
// where a link on the way points, as a tar that makes a link and then
// entries below it expects). The result is an O_PATH descriptor for the
// *at calls.
func (u *unpacker) openDir(rel string, create bool) (int, error) {
	return u.openDirHops(CleanRel(rel), create, 0)
}

func (u *unpacker) openDirHops(rel string, create bool, hops int) (int, error) {
	fd, err := openInRoot(u.root, rel)
	if err == nil || !create || !errors.Is(err, unix.ENOENT) || rel == "." {
		return fd, err
	}
	if hops > 40 {
		return -1, unix.ELOOP
	}
	parent, base := path.Split(rel)
	pfd, err := u.openDirHops(CleanRel(parent), true, hops)
	if err != nil {
		return -1, err
	}
	err = unix.Mkdirat(pfd, base, 0o755)
	if errors.Is(err, unix.EEXIST) {
		if target, lerr := readlinkAt(pfd, base); lerr == nil {
			unix.Close(pfd)
			// A dangling link: make its target, inside the root.
			if !path.IsAbs(target) {
				target = path.Join(parent, target)
			}
			tfd, err := u.openDirHops(CleanRel(target), true, hops+1)
			if err != nil {
				return -1, err
			}
			unix.Close(tfd)
			return openInRoot(u.root, rel)
		}
	}
	unix.Close(pfd)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	return openInRoot(u.root, rel)
}

func readlinkAt(pfd int, base string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(pfd, base, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// openInRoot opens the directory rel below the root descriptor with
// RESOLVE_IN_ROOT: the kernel resolves ".." and symbolic links as if root
// were "/", and refuses magic links (/proc/self/...) and mount crossings.
func openInRoot(root int, rel string) (int, error) {
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	for {
		fd, err := unix.Openat2(root, rel, how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue // a concurrent rename; the kernel asks to retry
		}
		return fd, err
	}
}

// CleanRel is p as a clean path relative to a root: ".." stops at the
// root, a leading "/" is dropped ("." for the root itself).
func CleanRel(p string) string {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return "."
	}
	return rel
}

// at is the path of base in the directory pfd, for the calls that have no
// *at form: the kernel resolves the descriptor, base is not followed by
// the l* calls.
func at(pfd int, base string) string {
	return "/proc/self/fd/" + strconv.Itoa(pfd) + "/" + base
}

func (u *unpacker) dirMeta(rel string, hdr *tar.Header) error {
	parent, base := path.Split(rel)
	pfd, err := u.openDir(parent, false)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return u.meta(pfd, base, hdr)
}

func (u *unpacker) meta(pfd int, base string, hdr *tar.Header) error {
	if u.asRoot {
		if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if !u.opts.Untrusted {
		for k, v := range hdr.PAXRecords {
			name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
			switch {
			case !ok:
				continue
			case u.opts.Xattr != nil:
				if !u.opts.Xattr(name) {
					return fmt.Errorf("extended attribute %q is not one this tar may carry: %w", name, errdefs.ErrInvalid)
				}
			case strings.HasPrefix(name, "trusted."):
				continue // trusted.overlay.* would change what overlayfs shows
			}
			err := unix.Lsetxattr(at(pfd, base), name, []byte(v), 0)
			if err != nil && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EPERM) {
				return fmt.Errorf("xattr %s: %w", name, err)
			}
		}
	}
	if hdr.Typeflag != tar.TypeSymlink {
		mode := uint32(hdr.Mode & 0o7777)
		if u.opts.Untrusted {
			mode &^= unix.S_ISUID | unix.S_ISGID
		}
		// After chown, which clears set-id bits. base is what this unpack
		// just made, not a link, so the call does not follow one.
		if err := unix.Fchmodat(pfd, base, mode, 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.AccessTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if hdr.AccessTime.IsZero() {
		ts[0] = ts[1]
	}
	return unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// removeAt removes base (a tree if a directory) from the directory pfd.
// base must name an entry of pfd: ".." (".wh..." in a layer) would be the
// directory's parent, "." the directory itself.
func removeAt(pfd int, base string) error {
	if base == "" || base == "." || base == ".." || strings.Contains(base, "/") {
		return fmt.Errorf("remove %q: not an entry of the directory: %w", base, errdefs.ErrInvalid)
	}
	err := unix.Unlinkat(pfd, base, 0)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.EPERM):
		// RemoveAll opens the parent through the descriptor and walks
		// below it with O_NOFOLLOW.
		return os.RemoveAll(at(pfd, base))
	}
	return err
}

// wrote reports whether this unpack wrote the entry rel.
func (u *unpacker) wrote(rel string) bool {
	_, ok := u.fresh[rel]
	return ok
}

// removeChildrenAt removes the entries of the directory pfd but those
// spare keeps.
func removeChildrenAt(pfd int, spare func(name string) bool) error {
	dfd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dfd), "dir")
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if spare(n) {
			continue
		}
		if err := removeAt(pfd, n); err != nil {
			return err
		}
	}
	return nil
}
