package e2eserve

import "syscall"

// unmountDetach lazily unmounts path.
func unmountDetach(path string) error { return syscall.Unmount(path, syscall.MNT_DETACH) }
