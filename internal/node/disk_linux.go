package node

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// freeDisk reports the bytes available to unprivileged users on the file
// system holding path.
func freeDisk(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}
