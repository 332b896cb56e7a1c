package nodebuild

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// xattrs returns the extended attributes of the file p (not following a
// symbolic link) that an artifact carries (artifactXattr), as the tar's
// PAX records; nil when it has none.
func xattrs(p string) (map[string]string, error) {
	buf, err := readAttr(func(b []byte) (int, error) { return unix.Llistxattr(p, b) })
	if err != nil || len(buf) == 0 {
		return nil, err
	}
	var recs map[string]string
	for _, name := range strings.Split(strings.TrimRight(string(buf), "\x00"), "\x00") {
		if !artifactXattr(name) {
			continue
		}
		v, err := readAttr(func(b []byte) (int, error) { return unix.Lgetxattr(p, name, b) })
		if errors.Is(err, unix.ENODATA) {
			continue // removed since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("xattr %s of %q: %w", name, p, err)
		}
		if recs == nil {
			recs = map[string]string{}
		}
		recs[xattrRecord+name] = string(v)
	}
	return recs, nil
}

// readAttr calls get with a buffer large enough for its answer (asked
// with an empty one first, asked again should it have grown).
func readAttr(get func([]byte) (int, error)) ([]byte, error) {
	for {
		n, err := get(nil)
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil // a file system without extended attributes
		}
		if err != nil || n == 0 {
			return nil, err
		}
		b := make([]byte, n)
		n, err = get(b)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return b[:n], nil
	}
}
