// Package mountinfo reads the mount points of this process's mount
// namespace from /proc/self/mountinfo, so that code that removes
// directories never removes through a mount and code that unmounts finds
// what is mounted.
package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// File is the mount table read by MountPoints and Under.
const File = "/proc/self/mountinfo"

// MountPoints returns every mount point, in the table's order (a mount
// point stacked twice appears twice, the upper one later).
func MountPoints() ([]string, error) {
	data, err := os.ReadFile(File)
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	return Parse(bytes.NewReader(data))
}

// Parse returns the mount points of a mountinfo table.
func Parse(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 5 {
			out = append(out, Unescape(f[4]))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	return out, nil
}

// Under returns the mount points strictly below dir (and dir itself when
// inclusive), deepest first; among mounts stacked on one point, the upper
// one first: the order to unmount them in.
func Under(dir string, inclusive bool) ([]string, error) {
	all, err := MountPoints()
	if err != nil {
		return nil, err
	}
	return below(all, dir, inclusive), nil
}

func below(all []string, dir string, inclusive bool) []string {
	dir = filepath.Clean(dir)
	var out []string
	for _, mp := range all {
		if strings.HasPrefix(mp, dir+"/") || inclusive && mp == dir {
			out = append(out, mp)
		}
	}
	slices.Reverse(out)
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Count(b, "/") - strings.Count(a, "/")
	})
	return out
}

// Unescape undoes the octal escapes (\040 for a space, \011, \012, \134)
// of a mountinfo path.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Mount is one line of the mount table.
type Mount struct {
	ID, Parent int
	// Root is the directory of the filesystem mounted at Point (for a
	// namespace file, "net:[inode]").
	Root   string
	Point  string
	FSType string
}

// Mounts returns every mount, in the table's order.
func Mounts() ([]Mount, error) {
	data, err := os.ReadFile(File)
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	return ParseMounts(bytes.NewReader(data))
}

// ParseMounts returns the mounts of a mountinfo table; lines it cannot
// read are skipped.
func ParseMounts(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if len(f) < 5 || sep < 6 || sep+1 >= len(f) {
			continue
		}
		id, err1 := strconv.Atoi(f[0])
		parent, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, Mount{ID: id, Parent: parent, Root: Unescape(f[3]), Point: Unescape(f[4]), FSType: f[sep+1]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	return out, nil
}
