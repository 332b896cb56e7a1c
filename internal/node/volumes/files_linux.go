package volumes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// Limits of the content calls.
const (
	// MaxListEntries bounds one listing.
	MaxListEntries = 10000
	// MaxListDepth bounds a listing's depth.
	MaxListDepth = 32
	// maxPath bounds a path's length.
	maxPath = 4096
)

// inRoot resolves a path inside the directory it starts from as if that
// were "/": ".." stops there, symbolic links resolve under it, and
// neither /proc's magic links nor another file system is crossed.
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// beneathNoLinks resolves one name in a directory without following
// any symbolic link (the name itself included).
const beneathNoLinks = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV

// clean turns a tenant's path into one relative to the volume's root
// ("." for the root): lexically, ".." stops at the root. The kernel
// resolves what is left (inRoot).
func clean(p string) (string, error) {
	if strings.ContainsRune(p, 0) || len(p) > maxPath {
		return "", errdefs.Publicf(errdefs.ErrInvalid, "path %q is not a valid path", p)
	}
	c := strings.TrimPrefix(path.Clean("/"+p), "/")
	if c == "" {
		c = "."
	}
	return c, nil
}

// display is rel as the API shows it: absolute within the volume.
func display(rel string) string {
	if rel == "." {
		return "/"
	}
	return "/" + rel
}

// classify maps a system call's error onto the errdefs classes, naming
// the tenant's path.
func classify(err error, p string) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	switch errno {
	case unix.ENOENT:
		return errdefs.Publicf(errdefs.ErrNotFound, "path %q not found", p)
	case unix.EEXIST:
		return errdefs.Publicf(errdefs.ErrAlreadyExists, "path %q already exists", p)
	case unix.ENOTDIR:
		return errdefs.Publicf(errdefs.ErrInvalid, "a component of path %q is not a directory", p)
	case unix.EISDIR:
		return errdefs.Publicf(errdefs.ErrInvalid, "path %q is a directory", p)
	case unix.ENOTEMPTY:
		return errdefs.Publicf(errdefs.ErrConflict, "directory %q is not empty", p)
	case unix.ELOOP:
		return errdefs.Publicf(errdefs.ErrInvalid, "path %q has too many symbolic links, or is one where none may be", p)
	case unix.EXDEV:
		return errdefs.Publicf(errdefs.ErrInvalid, "path %q leaves the volume", p)
	case unix.ENAMETOOLONG:
		return errdefs.Publicf(errdefs.ErrInvalid, "path %q is too long", p)
	case unix.ENOSPC, unix.EDQUOT:
		return errdefs.Publicf(errdefs.ErrExhausted, "the volume is full")
	case unix.EACCES, unix.EPERM:
		return errdefs.Publicf(errdefs.ErrForbidden, "path %q: permission denied", p)
	case unix.ENXIO, unix.ENODEV, unix.EOPNOTSUPP:
		return errdefs.Publicf(errdefs.ErrInvalid, "path %q is not a regular file or directory", p)
	}
	return fmt.Errorf("path %q: %w", p, err)
}

// openIn opens rel under dir (inRoot) with flags.
func openIn(dir *os.File, rel string, flags int) (*os.File, error) {
	fd, err := unix.Openat2(int(dir.Fd()), rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOCTTY), Resolve: inRoot})
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// openName opens name, one component in dir, following no link.
func openName(dir *os.File, name string, flags int) (*os.File, error) {
	fd, err := unix.Openat2(int(dir.Fd()), name, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NOFOLLOW), Resolve: beneathNoLinks})
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// parentOf opens the directory holding rel (resolved in the volume) and
// returns it with rel's last component; rel must not be the root.
func parentOf(v *volume, rel string) (*os.File, string, error) {
	if rel == "." {
		return nil, "", errdefs.Publicf(errdefs.ErrInvalid, "the path names the volume's root")
	}
	dir, err := openIn(v.data, path.Dir(rel), unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, "", classify(err, display(path.Dir(rel)))
	}
	return dir, path.Base(rel), nil
}

// entryOf is the entry of name in dir (not followed), shown at rel.
func entryOf(dir *os.File, name, rel string) (*nodeapi.VolumeEntry, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, classify(err, display(rel))
	}
	e := entryFromStat(&st, rel)
	if e.Type == nodeapi.VolumeSymlink {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
		if err == nil {
			e.Target = string(buf[:n])
		}
	}
	return e, nil
}

func entryFromStat(st *unix.Stat_t, rel string) *nodeapi.VolumeEntry {
	e := &nodeapi.VolumeEntry{
		Name: path.Base(display(rel)), Path: display(rel), Size: st.Size, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid,
		Atime: time.Unix(st.Atim.Sec, st.Atim.Nsec).UTC(), Mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC(),
		Ctime: time.Unix(st.Ctim.Sec, st.Ctim.Nsec).UTC(), Type: nodeapi.VolumeUnknown,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = nodeapi.VolumeFile
	case unix.S_IFDIR:
		e.Type = nodeapi.VolumeDirectory
	case unix.S_IFLNK:
		e.Type = nodeapi.VolumeSymlink
	}
	return e
}

// stat is the entry at rel: the root itself, or rel's last component in
// its parent (not followed).
func stat(v *volume, rel string) (*nodeapi.VolumeEntry, error) {
	if rel == "." {
		var st unix.Stat_t
		if err := unix.Fstat(int(v.data.Fd()), &st); err != nil {
			return nil, classify(err, "/")
		}
		return entryFromStat(&st, rel), nil
	}
	dir, name, err := parentOf(v, rel)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return entryOf(dir, name, rel)
}

// StatVolumePath implements nodeapi.VolumeService.
func (m *Manager) StatVolumePath(ctx context.Context, teamID, id, p string) (*nodeapi.VolumeEntry, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, err
	}
	v, done, err := m.use(teamID, id)
	if err != nil {
		return nil, err
	}
	defer done()
	return stat(v, rel)
}

// ListVolumeDir implements nodeapi.VolumeService: the entries of the
// directory at p (a link to one is followed), and of its directories
// (never a link) down to depth levels.
func (m *Manager) ListVolumeDir(ctx context.Context, teamID, id, p string, depth int) ([]nodeapi.VolumeEntry, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, err
	}
	if depth <= 0 {
		depth = 1
	}
	if depth > MaxListDepth {
		return nil, errdefs.Publicf(errdefs.ErrInvalid, "depth %d is more than %d", depth, MaxListDepth)
	}
	v, done, err := m.use(teamID, id)
	if err != nil {
		return nil, err
	}
	defer done()
	dir, err := openIn(v.data, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, classify(err, display(rel))
	}
	defer dir.Close()
	var out []nodeapi.VolumeEntry
	if err := list(ctx, dir, rel, depth, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func list(ctx context.Context, dir *os.File, rel string, depth int, out *[]nodeapi.VolumeEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return classify(err, display(rel))
	}
	for _, name := range names {
		if len(*out) >= MaxListEntries {
			return errdefs.Publicf(errdefs.ErrInvalid, "more than %d entries: list a directory further down, or less deep", MaxListEntries)
		}
		crel := path.Join(rel, name)
		e, err := entryOf(dir, name, crel)
		if errdefs.IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return err
		}
		*out = append(*out, *e)
		if depth > 1 && e.Type == nodeapi.VolumeDirectory {
			sub, err := openName(dir, name, unix.O_RDONLY|unix.O_DIRECTORY)
			if err != nil {
				continue // replaced meanwhile
			}
			err = list(ctx, sub, crel, depth-1, out)
			sub.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// ownerAndMode applies the owner and mode opts ask for (or the defaults:
// the parent's owner, def) to f.
func ownerAndMode(f, parent *os.File, uid, gid, mode *uint32, def uint32) error {
	var pst unix.Stat_t
	if err := unix.Fstat(int(parent.Fd()), &pst); err != nil {
		return err
	}
	u, g, md := pst.Uid, pst.Gid, def
	if uid != nil {
		u = *uid
	}
	if gid != nil {
		g = *gid
	}
	if mode != nil {
		md = *mode & 0o7777
	}
	if err := unix.Fchown(int(f.Fd()), int(u), int(g)); err != nil {
		return err
	}
	// After the chown, which clears the set-ID bits.
	return unix.Fchmod(int(f.Fd()), md)
}

// MakeVolumeDir implements nodeapi.VolumeService.
func (m *Manager) MakeVolumeDir(ctx context.Context, teamID, id, p string, opts nodeapi.VolumeFileOptions) (*nodeapi.VolumeEntry, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, err
	}
	v, done, err := m.use(teamID, id)
	if err != nil {
		return nil, err
	}
	defer done()
	if rel == "." {
		if opts.Force {
			return stat(v, rel)
		}
		return nil, errdefs.Publicf(errdefs.ErrAlreadyExists, "path %q already exists", "/")
	}
	if !opts.Force {
		if err := mkdirOne(v, rel, opts); err != nil {
			return nil, err
		}
		return stat(v, rel)
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		err := mkdirOne(v, sub, opts)
		if errdefs.IsAlreadyExists(err) {
			// A directory (or a link to one, in the volume) is fine.
			if d, oerr := openIn(v.data, sub, unix.O_RDONLY|unix.O_DIRECTORY); oerr == nil {
				d.Close()
				continue
			} else {
				return nil, classify(oerr, display(sub))
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return stat(v, rel)
}

// mkdirOne makes directory rel, whose parent exists.
func mkdirOne(v *volume, rel string, opts nodeapi.VolumeFileOptions) error {
	parent, name, err := parentOf(v, rel)
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := unix.Mkdirat(int(parent.Fd()), name, 0o700); err != nil {
		return classify(err, display(rel))
	}
	d, err := openName(parent, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return classify(err, display(rel))
	}
	defer d.Close()
	if err := ownerAndMode(d, parent, opts.UID, opts.GID, opts.Mode, 0o755); err != nil {
		return classify(err, display(rel))
	}
	return nil
}

// SetVolumeMetadata implements nodeapi.VolumeService. A link is followed
// (in the volume), as chmod(1) and chown(1) do.
func (m *Manager) SetVolumeMetadata(ctx context.Context, teamID, id, p string, md nodeapi.VolumeMetadata) (*nodeapi.VolumeEntry, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, err
	}
	v, done, err := m.use(teamID, id)
	if err != nil {
		return nil, err
	}
	defer done()
	f, err := openIn(v.data, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, classify(err, display(rel))
	}
	defer f.Close()
	if md.UID != nil || md.GID != nil {
		u, g := -1, -1
		if md.UID != nil {
			u = int(*md.UID)
		}
		if md.GID != nil {
			g = int(*md.GID)
		}
		if err := unix.Fchown(int(f.Fd()), u, g); err != nil {
			return nil, classify(err, display(rel))
		}
	}
	if md.Mode != nil {
		if err := unix.Fchmod(int(f.Fd()), *md.Mode&0o7777); err != nil {
			return nil, classify(err, display(rel))
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, classify(err, display(rel))
	}
	return entryFromStat(&st, rel), nil
}

// RemoveVolumePath implements nodeapi.VolumeService: a link is removed,
// not followed; a directory goes with everything in it.
func (m *Manager) RemoveVolumePath(ctx context.Context, teamID, id, p string) error {
	rel, err := clean(p)
	if err != nil {
		return err
	}
	v, done, err := m.use(teamID, id)
	if err != nil {
		return err
	}
	defer done()
	parent, name, err := parentOf(v, rel)
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := removeAll(ctx, parent, name); err != nil {
		return classify(err, display(rel))
	}
	return nil
}

// removeAll removes name in dir, and what it holds when it is a
// directory, through directory descriptors only.
func removeAll(ctx context.Context, dir *os.File, name string) error {
	err := unix.Unlinkat(int(dir.Fd()), name, 0)
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	sub, err := openName(dir, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			sub.Close()
			return err
		}
		names, rerr := sub.Readdirnames(1024)
		for _, n := range names {
			if err := removeAll(ctx, sub, n); err != nil && !errors.Is(err, unix.ENOENT) {
				sub.Close()
				return err
			}
		}
		if rerr != nil || len(names) == 0 {
			break
		}
		if _, err := sub.Seek(0, io.SeekStart); err != nil {
			break
		}
	}
	sub.Close()
	return unix.Unlinkat(int(dir.Fd()), name, unix.AT_REMOVEDIR)
}

// readFile is an open file of a volume whose Close gives back the
// content call's hold.
type readFile struct {
	*os.File
	m    *Manager
	done func()
}

func (r *readFile) Read(b []byte) (int, error) {
	n, err := r.File.Read(b)
	r.m.bytes.WithLabelValues("read").Add(float64(n))
	return n, err
}

func (r *readFile) Close() error {
	err := r.File.Close()
	r.done()
	return err
}

// ReadVolumeFile implements nodeapi.VolumeService. A link is followed (in
// the volume); anything but a regular file is refused (a FIFO is opened
// without blocking; nothing on a volume is a device on the host).
func (m *Manager) ReadVolumeFile(ctx context.Context, teamID, id, p string) (io.ReadCloser, *nodeapi.VolumeEntry, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, nil, err
	}
	v, done, err := m.use(teamID, id)
	if err != nil {
		return nil, nil, err
	}
	f, err := openIn(v.data, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		done()
		return nil, nil, classify(err, display(rel))
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		done()
		return nil, nil, classify(err, display(rel))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		done()
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return nil, nil, errdefs.Publicf(errdefs.ErrInvalid, "path %q is a directory", display(rel))
		}
		return nil, nil, errdefs.Publicf(errdefs.ErrInvalid, "path %q is not a regular file", display(rel))
	}
	return &readFile{File: f, m: m, done: done}, entryFromStat(&st, rel), nil
}

// WriteVolumeFile implements nodeapi.VolumeService: r goes to a new file
// in the volume's staging directory, which is synced, given its owner
// and mode, and renamed over path in one step (renameat2, with
// RENAME_NOREPLACE unless opts.Force); the directory is synced last. A
// link at path is replaced, not followed.
func (m *Manager) WriteVolumeFile(ctx context.Context, teamID, id, p string, opts nodeapi.VolumeFileOptions, r io.Reader) (*nodeapi.VolumeEntry, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, err
	}
	v, done, err := m.use(teamID, id)
	if err != nil {
		return nil, err
	}
	defer done()
	parent, name, err := parentOf(v, rel)
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	if !opts.Force {
		// Fail early, before the upload; the rename checks again.
		var st unix.Stat_t
		if err := unix.Fstatat(int(parent.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			return nil, errdefs.Publicf(errdefs.ErrAlreadyExists, "path %q already exists; write with force to replace it", display(rel))
		}
	}
	var rnd [12]byte
	rand.Read(rnd[:])
	tmp := "w-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(int(v.staging.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, classify(err, display(rel))
	}
	f := os.NewFile(uintptr(fd), tmp)
	committed := false
	defer func() {
		f.Close()
		if !committed {
			unix.Unlinkat(int(v.staging.Fd()), tmp, 0) // a leftover goes at the next mount
		}
	}()
	n, err := io.Copy(f, contextReader{ctx, r})
	m.bytes.WithLabelValues("write").Add(float64(n))
	if err != nil {
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			return nil, classify(unix.ENOSPC, display(rel))
		}
		return nil, fmt.Errorf("write %q: %w", display(rel), errors.Join(errdefs.ErrUnavailable, err))
	}
	if err := f.Sync(); err != nil {
		return nil, classify(err, display(rel))
	}
	if err := ownerAndMode(f, parent, opts.UID, opts.GID, opts.Mode, 0o644); err != nil {
		return nil, classify(err, display(rel))
	}
	var flags uint
	if !opts.Force {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(int(v.staging.Fd()), tmp, int(parent.Fd()), name, flags); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, errdefs.Publicf(errdefs.ErrAlreadyExists, "path %q already exists; write with force to replace it", display(rel))
		}
		return nil, classify(err, display(rel))
	}
	committed = true
	if err := parent.Sync(); err != nil {
		return nil, classify(err, display(rel))
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, classify(err, display(rel))
	}
	return entryFromStat(&st, rel), nil
}

// contextReader ends a copy when its context does.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}
