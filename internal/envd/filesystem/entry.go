package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/warren-sandbox/warren/api/envd/filesystem"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// MetadataPrefix is the xattr namespace of user metadata.
const MetadataPrefix = "user.e2b."

// Entry describes path (not following a final symbolic link).
func Entry(path string) (*pb.EntryInfo, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, statErr(path, err)
	}
	return entryFromInfo(path, st), nil
}

func statErr(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.Classf(errdefs.ErrNotFound, "file not found: %s", path)
	case errors.Is(err, fs.ErrPermission):
		return errdefs.Classf(errdefs.ErrForbidden, "path %s: permission denied", path)
	default:
		return fmt.Errorf("stat %s: %w", path, err)
	}
}

func entryFromInfo(path string, st fs.FileInfo) *pb.EntryInfo {
	e := &pb.EntryInfo{
		Name:         filepath.Base(path),
		Path:         path,
		Size:         st.Size(),
		Mode:         uint32(st.Mode().Perm()),
		Permissions:  Permissions(st.Mode()),
		ModifiedTime: timestamppb.New(st.ModTime()),
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		e.Type = pb.FileType_FILE_TYPE_SYMLINK
		if t, err := os.Readlink(path); err == nil {
			if !filepath.IsAbs(t) {
				t = filepath.Join(filepath.Dir(path), t)
			}
			e.SymlinkTarget = &t
		}
	case st.IsDir():
		e.Type = pb.FileType_FILE_TYPE_DIRECTORY
	case st.Mode().IsRegular():
		e.Type = pb.FileType_FILE_TYPE_FILE
	default:
		// Devices, sockets and pipes: reported as files so clients list them.
		e.Type = pb.FileType_FILE_TYPE_FILE
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		e.Owner = userName(sys.Uid)
		e.Group = groupName(sys.Gid)
	}
	if e.Type != pb.FileType_FILE_TYPE_SYMLINK {
		if md, err := ReadMetadata(path); err == nil && len(md) > 0 {
			e.Metadata = md
		}
	}
	return e
}

// Permissions renders a mode as ls does, e.g. "-rw-r--r--", "drwxr-xr-x",
// "lrwxrwxrwx".
func Permissions(m fs.FileMode) string {
	var b [10]byte
	switch {
	case m&fs.ModeDir != 0:
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	default:
		b[0] = '-'
	}
	const rwx = "rwxrwxrwx"
	for i := 0; i < 9; i++ {
		if m&(1<<uint(8-i)) != 0 {
			b[i+1] = rwx[i]
		} else {
			b[i+1] = '-'
		}
	}
	special := func(i int, set bool, lower, upper byte) {
		if !set {
			return
		}
		if b[i] == '-' {
			b[i] = upper
		} else {
			b[i] = lower
		}
	}
	special(3, m&fs.ModeSetuid != 0, 's', 'S')
	special(6, m&fs.ModeSetgid != 0, 's', 'S')
	special(9, m&fs.ModeSticky != 0, 't', 'T')
	return string(b[:])
}

func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil {
		return u.Username
	}
	return id
}

func groupName(gid uint32) string {
	id := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(id); err == nil {
		return g.Name
	}
	return id
}

// ReadMetadata returns the user.e2b.* extended attributes of path, prefix
// removed.
func ReadMetadata(path string) (map[string]string, error) {
	names, err := listXattr(path)
	if err != nil {
		return nil, err
	}
	md := map[string]string{}
	for _, n := range names {
		key, ok := strings.CutPrefix(n, MetadataPrefix)
		if !ok {
			continue
		}
		v, err := getXattr(path, n)
		if err != nil {
			continue
		}
		md[key] = v
	}
	return md, nil
}

func listXattr(path string) ([]string, error) {
	size, err := unix.Llistxattr(path, nil)
	if err != nil || size == 0 {
		return nil, err
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(path, buf)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range strings.Split(string(buf[:size]), "\x00") {
		if n != "" {
			out = append(out, n)
		}
	}
	return out, nil
}

func getXattr(path, name string) (string, error) {
	size, err := unix.Lgetxattr(path, name, nil)
	if err != nil {
		return "", err
	}
	buf := make([]byte, size)
	size, err = unix.Lgetxattr(path, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:size]), nil
}

// WriteMetadata replaces the user.e2b.* attributes of path with md.
func WriteMetadata(path string, md map[string]string) error {
	names, err := listXattr(path)
	if err != nil && !errors.Is(err, unix.ENOTSUP) {
		return fmt.Errorf("metadata of %s: %w", path, err)
	}
	for _, n := range names {
		key, ok := strings.CutPrefix(n, MetadataPrefix)
		if _, keep := md[key]; ok && !keep {
			if err := unix.Lremovexattr(path, n); err != nil {
				return fmt.Errorf("metadata %q of %s: %w", key, path, err)
			}
		}
	}
	for k, v := range md {
		if err := unix.Lsetxattr(path, MetadataPrefix+k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return errdefs.Classf(errdefs.ErrUnsupported, "metadata of %s: filesystem has no user extended attributes", path)
			}
			return fmt.Errorf("metadata %q of %s: %w", k, path, err)
		}
	}
	return nil
}
