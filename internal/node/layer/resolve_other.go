//go:build !linux

package layer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// ResolveInRoot returns the host path of rel inside root, following the
// symbolic links met on the way as if root were "/": absolute link targets
// and ".." stop at root. The final component is resolved too when it is a
// link. Missing components are kept as they are.
func ResolveInRoot(root, rel string) (string, error) {
	pending := splitPath(rel)
	var resolved []string
	hops := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(resolved) > 0 {
				resolved = resolved[:len(resolved)-1]
			}
			continue
		}
		p := filepath.Join(root, filepath.Join(resolved...), c)
		fi, err := os.Lstat(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				resolved = append(resolved, c)
				for _, rest := range pending {
					switch rest {
					case "", ".":
					case "..":
						if len(resolved) > 0 {
							resolved = resolved[:len(resolved)-1]
						}
					default:
						resolved = append(resolved, rest)
					}
				}
				return filepath.Join(root, filepath.Join(resolved...)), nil
			}
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			resolved = append(resolved, c)
			continue
		}
		hops++
		if hops > 255 {
			return "", fmt.Errorf("path %q: too many symbolic links: %w", rel, errdefs.ErrInvalid)
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			resolved = resolved[:0]
		}
		pending = append(splitPath(target), pending...)
	}
	return filepath.Join(root, filepath.Join(resolved...)), nil
}

func splitPath(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}
