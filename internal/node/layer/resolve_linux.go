package layer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// ResolveInRoot returns the host path of rel inside root, following the
// symbolic links met on the way as if root were "/": absolute link targets
// and ".." stop at root. The kernel does the resolution (openat2 with
// RESOLVE_IN_ROOT on the longest prefix of rel that exists); the final
// component is resolved too when it is a link, a dangling one to where it
// points. Missing components are kept as they are.
func ResolveInRoot(root, rel string) (string, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", rel, err)
	}
	defer unix.Close(rfd)
	// The root as the kernel names it (root itself may be reached
	// through links); results are given below root as passed.
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(rfd))
	if err != nil {
		return "", err
	}
	in, err := resolveFd(rfd, real, rel, 0)
	if err != nil {
		return "", fmt.Errorf("path %q: %w", rel, err)
	}
	return filepath.Join(root, in), nil
}

// resolveFd returns where rel resolves below the root descriptor rfd
// (whose path is root), relative to root.
func resolveFd(rfd int, root, rel string, hops int) (string, error) {
	if hops > 255 {
		return "", fmt.Errorf("too many symbolic links: %w", errdefs.ErrInvalid)
	}
	comps := splitPath(rel)
	for i := len(comps); i >= 0; i-- {
		prefix := strings.Join(comps[:i], "/")
		if prefix == "" {
			prefix = "."
		}
		real, err := realPath(rfd, prefix)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return "", err
		}
		if real != root && !strings.HasPrefix(real, root+"/") {
			return "", fmt.Errorf("resolved to %q, outside %q: %w", real, root, errdefs.ErrInvalid)
		}
		rest := comps[i:]
		if len(rest) > 0 && rest[0] != ".." && rest[0] != "." && rest[0] != "" {
			// The first missing component may be a dangling link: go on
			// from where it points.
			buf := make([]byte, 4096)
			if n, err := unix.Readlink(filepath.Join(real, rest[0]), buf); err == nil {
				target := string(buf[:n])
				if !strings.HasPrefix(target, "/") {
					target = strings.TrimPrefix(strings.TrimPrefix(real, root), "/") + "/" + target
				}
				return resolveFd(rfd, root, target+"/"+strings.Join(rest[1:], "/"), hops+1)
			}
		}
		out := strings.Split(strings.TrimPrefix(strings.TrimPrefix(real, root), "/"), "/")
		if out[0] == "" {
			out = out[:0]
		}
		for _, c := range rest {
			switch c {
			case "", ".":
			case "..":
				if len(out) > 0 {
					out = out[:len(out)-1]
				}
			default:
				out = append(out, c)
			}
		}
		return filepath.Join(out...), nil
	}
	return "", fmt.Errorf("resolve %q: %w", rel, unix.ENOENT)
}

// realPath is where the kernel resolves prefix below the root descriptor,
// inside it: the path of the opened descriptor.
func realPath(rfd int, prefix string) (string, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	var err error
	for {
		fd, err = unix.Openat2(rfd, prefix, how)
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
}

func splitPath(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}
