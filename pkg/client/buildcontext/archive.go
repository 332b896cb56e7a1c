package buildcontext

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"strconv"
)

// Hash is the E2B SDKs' hash of a COPY step's files (their
// calculateFilesHash without symlink resolution): SHA-256 over
// "<typ> <src> <dest>", then for each file in path order its relative
// path, st_mode and size in decimal, and the content of a regular file
// or the target of a link.
func (bc *Context) Hash(typ, src, dest string, files []File) (string, error) {
	h := sha256.New()
	io.WriteString(h, typ+" "+src+" "+dest)
	for _, f := range files {
		io.WriteString(h, f.Path)
		io.WriteString(h, strconv.FormatUint(uint64(unixMode(f.Info.Mode())), 10))
		io.WriteString(h, strconv.FormatInt(f.Info.Size(), 10))
		switch {
		case f.Info.Mode()&fs.ModeSymlink != 0:
			l, err := bc.readlink(f)
			if err != nil {
				return "", err
			}
			io.WriteString(h, l)
		case f.Info.Mode().IsRegular():
			if err := bc.copyFile(h, f); err != nil {
				return "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// unixMode is the st_mode of m: the file type bits, the set-id and
// sticky bits and the permissions.
func unixMode(m fs.FileMode) uint32 {
	out := uint32(m.Perm())
	switch {
	case m.IsRegular():
		out |= 0o100000
	case m.IsDir():
		out |= 0o040000
	case m&fs.ModeSymlink != 0:
		out |= 0o120000
	case m&fs.ModeNamedPipe != 0:
		out |= 0o010000
	case m&fs.ModeSocket != 0:
		out |= 0o140000
	case m&fs.ModeCharDevice != 0:
		out |= 0o020000
	case m&fs.ModeDevice != 0:
		out |= 0o060000
	}
	if m&fs.ModeSetuid != 0 {
		out |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		out |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		out |= 0o1000
	}
	return out
}

func (bc *Context) path(f File) string {
	if f.Path == "" {
		return "."
	}
	return f.Path
}

func (bc *Context) readlink(f File) (string, error) {
	return bc.root.Readlink(bc.path(f))
}

// copyFile copies the regular file f to w. It is opened through the
// root: a file swapped for a symlink out of the context since Files
// listed it is refused.
func (bc *Context) copyFile(w io.Writer, f File) error {
	in, err := bc.root.Open(bc.path(f))
	if err != nil {
		return err
	}
	defer in.Close()
	if _, err := io.Copy(w, in); err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	return nil
}

// WriteTarGz writes files as a gzip'd tar to w: paths relative to the
// context, owned by root (the COPY step sets the owner), symlinks as
// links; devices, sockets and pipes are left out.
func (bc *Context) WriteTarGz(w io.Writer, files []File) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		if f.Path == "" {
			continue // the context itself: the root of the archive
		}
		link := ""
		if f.Info.Mode()&fs.ModeSymlink != 0 {
			l, err := bc.readlink(f)
			if err != nil {
				return err
			}
			link = l
		} else if !f.Info.IsDir() && !f.Info.Mode().IsRegular() {
			continue
		}
		hdr, err := tar.FileInfoHeader(f.Info, link)
		if err != nil {
			return err
		}
		hdr.Name = f.Path
		if f.Info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if f.Info.Mode().IsRegular() {
			if err := bc.copyFile(tw, f); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
