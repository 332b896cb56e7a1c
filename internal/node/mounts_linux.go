package node

import "github.com/warren-sandbox/warren/internal/mountinfo"

// mountsUnder lists the mount points at or below dir, so that a directory
// is never removed through a mount.
func mountsUnder(dir string) ([]string, error) { return mountinfo.Under(dir, true) }
