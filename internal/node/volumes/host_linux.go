package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/rootfs"
)

// host makes, mounts and unmounts the volumes' ext4 images.
type host struct {
	mkfs   string
	detach time.Duration
}

func newHost(mkfs string, detach time.Duration) (host, error) {
	p, err := exec.LookPath(mkfs)
	if err != nil {
		return host{}, fmt.Errorf("volumes: %s (install e2fsprogs): %w", mkfs, errors.Join(errdefs.ErrUnavailable, err))
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return host{}, fmt.Errorf("volumes: loop devices: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	return host{mkfs: p, detach: detach}, nil
}

func (h host) imageBytes(mb int64) int64 { return rootfs.ImageBytes(mb) }

func (h host) makeImage(ctx context.Context, img string, mb int64) error {
	return rootfs.MakeImage(ctx, h.mkfs, img, mb)
}

// mountFlags are the host mount's: nothing on a volume is a device,
// runs or gains privileges on the host.
const mountFlags = unix.MS_NOATIME | unix.MS_NODEV | unix.MS_NOSUID | unix.MS_NOEXEC

// mount mounts image img at mnt unless something is mounted there.
func (h host) mount(ctx context.Context, img, mnt string) error {
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	mounted, err := rootfs.IsMountPoint(mnt)
	if err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	if mounted {
		return nil
	}
	// The file system of an earlier mount may still be alive in a gofer
	// that is exiting: a second one over the same image would lose what
	// the first has not written back.
	if err := rootfs.WaitDetached(ctx, img, h.detach); err != nil {
		return err
	}
	dev, lf, err := rootfs.AttachLoop(img)
	if err != nil {
		return err
	}
	err = unix.Mount(dev, mnt, "ext4", mountFlags, "")
	lf.Close() // the mount holds the device now
	if err != nil {
		return fmt.Errorf("mount %s on %s: %w", dev, mnt, errors.Join(errdefs.ErrUnavailable, err))
	}
	return nil
}

// unmount unmounts the volume in dir and waits until its file system is
// written back to its image.
func (h host) unmount(ctx context.Context, dir string) error {
	mnt := filepath.Join(dir, fsDir)
	if _, err := os.Lstat(mnt); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := rootfs.UnmountPath(mnt); err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	img := filepath.Join(dir, imageFile)
	if _, err := os.Lstat(img); err != nil {
		return nil
	}
	return rootfs.WaitDetached(ctx, img, h.detach)
}

// freeDisk reports the bytes available on the file system of path.
func freeDisk(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// openDir opens directory p, which must not be a symbolic link.
func openDir(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, errors.Join(errdefs.ErrUnavailable, err))
	}
	return os.NewFile(uintptr(fd), p), nil
}

// syncDir syncs directory p (a rename in it reaches the disk).
func syncDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
