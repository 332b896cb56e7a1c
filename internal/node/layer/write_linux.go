package layer

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// WriteTree writes the tree at root as a tar to w, as a build's artifact
// carries it: directories, regular files (hard links as links) and
// symbolic links, in lexical order, with their modes, owners, times and
// the extended attributes keep accepts (as PAX records). Device nodes,
// sockets and pipes are left out, and ".wh." names are files like any
// other: Unpack with Options.Tree reads it back.
func WriteTree(ctx context.Context, root string, w io.Writer, keep func(name string) bool) error {
	tw := tar.NewWriter(w)
	links := hardLinks{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h, err := treeHeader(p, filepath.ToSlash(rel), fi, links)
		if err != nil || h == nil {
			return err
		}
		if h.Typeflag != tar.TypeLink { // a hard link shares its source's
			if h.PAXRecords, _, err = readXattrs(p, keep); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		return writeBody(tw, h, p)
	})
	if err != nil {
		return fmt.Errorf("tar of %s: %w", root, err)
	}
	return tw.Close()
}

// WriteDiff writes the upper directory of an overlay mount as an OCI
// layer tar to w, which Unpack applies over the same lower tree: a
// character device 0/0 (overlayfs' whiteout) becomes ".wh.NAME", a
// directory marked opaque gets ".wh..wh..opq" first; directories, regular
// files (hard links as links) and symbolic links keep their modes, owners,
// times and the extended attributes keep accepts. Other device nodes,
// sockets and pipes are left out.
func WriteDiff(ctx context.Context, upper string, w io.Writer, keep func(name string) bool) error {
	tw := tar.NewWriter(w)
	links := hardLinks{}
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&fs.ModeCharDevice != 0 && st != nil && st.Rdev == 0 {
			dir, base := path.Split(name)
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: dir + whiteoutPrefix + base, Mode: 0o600,
				ModTime: fi.ModTime(), Format: tar.FormatPAX})
		}
		if strings.HasPrefix(path.Base(name), whiteoutPrefix) {
			// The layer format reserves these names: Unpack would take the
			// file for a whiteout and delete what it names instead.
			return fmt.Errorf("%s: a file whose name begins %q cannot travel in a layer: %w", name, whiteoutPrefix, errdefs.ErrUnsupported)
		}
		h, err := treeHeader(p, name, fi, links)
		if err != nil || h == nil {
			return err
		}
		opaque := false
		if h.Typeflag != tar.TypeLink {
			if h.PAXRecords, opaque, err = readXattrs(p, keep); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if opaque {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: h.Name + whiteoutOpaque, Mode: 0o600,
				ModTime: fi.ModTime(), Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		return writeBody(tw, h, p)
	})
	if err != nil {
		return fmt.Errorf("diff of %s: %w", upper, err)
	}
	return tw.Close()
}

// readXattrs returns the PAX records of the extended attributes of p (not
// following a symbolic link) that keep accepts (nil when none), and
// whether overlayfs marked p opaque; its marker is never a record.
func readXattrs(p string, keep func(string) bool) (map[string]string, bool, error) {
	names, err := listXattrs(p)
	if err != nil {
		return nil, false, err
	}
	var recs map[string]string
	opaque := false
	for _, n := range names {
		v, err := getXattr(p, n)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, false, err
		}
		switch {
		case n == overlayOpaqueXattr:
			opaque = string(v) == "y"
		case keep != nil && keep(n):
			if recs == nil {
				recs = map[string]string{}
			}
			recs["SCHILY.xattr."+n] = string(v)
		}
	}
	return recs, opaque, nil
}

func listXattrs(p string) ([]string, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Llistxattr(p, buf)
		if err == unix.ERANGE {
			buf = make([]byte, len(buf)*4)
			continue
		}
		if err == unix.ENOTSUP {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list xattrs of %s: %w", p, err)
		}
		var out []string
		start := 0
		for i := 0; i < n; i++ {
			if buf[i] == 0 {
				if i > start {
					out = append(out, string(buf[start:i]))
				}
				start = i + 1
			}
		}
		return out, nil
	}
}

func getXattr(p, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(p, name, buf)
		if err == unix.ERANGE {
			buf = make([]byte, len(buf)*4)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("xattr %s of %s: %w", name, p, err)
		}
		return buf[:n], nil
	}
}
