package layer

import (
	"archive/tar"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// hardLinks remembers the regular files with more than one link a tree's tar
// has carried, so that later names of the same file go as hard links.
type hardLinks map[[2]uint64]string

// treeHeader returns the tar header of the file at p, named name in the
// tar, as a build artifact and a layer diff carry it: directories (name
// with a trailing slash), regular files (a later name of a file already
// carried as a hard link to it) and symbolic links keep their modes,
// owners and times, with no user or group names; nil for any other kind.
// The caller adds the extended attributes.
func treeHeader(p, name string, fi fs.FileInfo, carried hardLinks) (*tar.Header, error) {
	var target string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		var err error
		if target, err = os.Readlink(p); err != nil {
			return nil, err
		}
	case fi.Mode().IsDir(), fi.Mode().IsRegular():
	default:
		return nil, nil
	}
	h, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return nil, err
	}
	h.Name, h.Uname, h.Gname = name, "", ""
	if fi.IsDir() {
		h.Name += "/"
	}
	h.AccessTime, h.ChangeTime = fi.ModTime(), fi.ModTime()
	h.Format = tar.FormatPAX
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
		if fi.Mode().IsRegular() && st.Nlink > 1 {
			key := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
			if first, ok := carried[key]; ok {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			} else {
				carried[key] = h.Name
			}
		}
	}
	return h, nil
}

// writeBody copies the content of the file at p after its header h was
// written, when h is a regular file's.
func writeBody(tw *tar.Writer, h *tar.Header, p string) error {
	if h.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}
