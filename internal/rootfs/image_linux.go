package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// The helpers below give other owners of ext4 images (the node's volumes,
// internal/node/volumes) the writable layer's machinery: an image whose
// usage the kernel bounds, its loop device, its mount.

// MakeImage creates img, a sparse file holding an empty ext4 file system
// (made by the mkfs.ext4 binary mkfs) with at least mb MiB free.
func MakeImage(ctx context.Context, mkfs, img string, mb int64) error {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	err = f.Truncate(imageMB(mb) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	// No reserved blocks (the owner takes the whole image); lazy init so
	// that mkfs writes only metadata; no discard of the sparse file.
	cmd := exec.CommandContext(ctx, mkfs, "-q", "-F", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", img)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %s: %w", strings.TrimSpace(string(out)), errors.Join(errdefs.ErrUnavailable, err))
	}
	return nil
}

// ImageBytes is the size of the image MakeImage makes for mb MiB free.
func ImageBytes(mb int64) int64 { return imageMB(mb) << 20 }

// AttachLoop binds img to a free loop device with auto-clear (the device
// goes with its last mount); the caller mounts the device, then closes
// the returned file.
func AttachLoop(img string) (string, *os.File, error) { return attachLoop(img) }

// WaitDetached waits, at most timeout, until no loop device is backed by
// img: until the file system of an earlier mount of it is gone and
// written back (see waitDetached).
func WaitDetached(ctx context.Context, img string, timeout time.Duration) error {
	_, err := waitDetached(ctx, img, timeout)
	return err
}

// UnmountPath unmounts everything stacked on p (lazily when busy); not
// mounted is not an error.
func UnmountPath(p string) error { return unmountPath(p) }

// IsMountPoint reports whether p is a mount point.
func IsMountPoint(p string) (bool, error) { return isMountPoint(p) }
