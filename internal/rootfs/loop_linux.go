package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/mountinfo"
)

// attachLoop binds img to a free loop device with LOOP_CONFIGURE and
// auto-clear: the device detaches itself when its last user (the mount)
// goes away. The caller mounts the device and then closes the returned file.
func attachLoop(img string) (string, *os.File, error) {
	imgf, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return "", nil, fmt.Errorf("open image: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	defer imgf.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", nil, fmt.Errorf("loop control: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	defer ctl.Close()
	for attempt := 0; attempt < 64; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("free loop device: %w", errors.Join(errdefs.ErrExhausted, err))
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		lf, err := os.OpenFile(dev, os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			// No devtmpfs node (e.g. in a container): make one.
			if err := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
				return "", nil, fmt.Errorf("create %s: %w", dev, errors.Join(errdefs.ErrUnavailable, err))
			}
			lf, err = os.OpenFile(dev, os.O_RDWR, 0)
		}
		if err != nil {
			return "", nil, fmt.Errorf("open %s: %w", dev, errors.Join(errdefs.ErrUnavailable, err))
		}
		cfg := unix.LoopConfig{Fd: uint32(imgf.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], img)
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) {
			// Direct I/O needs a backing file system that supports it.
			cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
			err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		}
		if err == nil {
			return dev, lf, nil
		}
		lf.Close()
		if !errors.Is(err, unix.EBUSY) {
			return "", nil, fmt.Errorf("configure %s: %w", dev, errors.Join(errdefs.ErrUnavailable, err))
		}
		// Another process took the device between GET_FREE and CONFIGURE.
	}
	return "", nil, fmt.Errorf("no loop device after retries: %w", errdefs.ErrExhausted)
}

// detachLoop clears a loop device. On a device still in use the kernel
// turns on auto-clear instead.
func detachLoop(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	return nil
}

// loopDevice is an attached loop device and its backing file.
type loopDevice struct {
	Dev     string
	Backing string // without the kernel's " (deleted)" suffix
}

// listLoops returns the attached loop devices from sysfs.
func listLoops() ([]loopDevice, error) {
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return nil, err
	}
	var out []loopDevice
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "loop") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "loop", "backing_file"))
		if err != nil {
			continue // not attached
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		out = append(out, loopDevice{Dev: "/dev/" + e.Name(), Backing: backing})
	}
	return out, nil
}

// loopsBacking returns the loop devices whose backing file is img.
func loopsBacking(img string) ([]string, error) {
	loops, err := listLoops()
	if err != nil {
		return nil, err
	}
	paths := map[string]bool{img: true}
	if real, err := filepath.EvalSymlinks(img); err == nil {
		paths[real] = true
	}
	var out []string
	for _, l := range loops {
		if paths[l.Backing] {
			out = append(out, l.Dev)
		}
	}
	return out, nil
}

// waitDetached waits until no loop device is backed by img, at most
// timeout. A layer's file system can outlive its mounts: a busy mount is
// detached lazily, and a process in another mount namespace keeps its own
// copy of the mount (runsc's gofer, still exiting after its sandbox was
// deleted, holds the sandbox's root filesystem). Until that file system
// goes, writes it has not flushed are in its page cache, not in the image:
// a second mount of the image (over another loop device) would read the
// layer without them, and its writes would later be overwritten; a copy of
// the image would miss them. Auto-clear detaches the device when the last
// holder lets go, after the file system is written back.
// It reports how long it waited (0 when nothing held the image).
func waitDetached(ctx context.Context, img string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	delay := 5 * time.Millisecond
	for {
		devs, err := loopsBacking(img)
		if err != nil {
			return time.Since(start), fmt.Errorf("image %s: loop devices: %w", img, errors.Join(errdefs.ErrUnavailable, err))
		}
		if len(devs) == 0 {
			if delay == 5*time.Millisecond {
				return 0, nil // not held: no wait
			}
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("image %s is still in use through %s after %s (a process keeps its file system): %w",
				img, strings.Join(devs, ", "), timeout, errdefs.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("image %s: waiting for %s to detach: %w", img, strings.Join(devs, ", "), ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) { return mountinfo.Under(dir, true) }

func isMountPoint(p string) (bool, error) {
	all, err := mountinfo.MountPoints()
	if err != nil {
		return false, err
	}
	for _, mp := range all {
		if mp == p {
			return true, nil
		}
	}
	return false, nil
}

// unmountPath unmounts everything stacked on p; a busy mount is detached
// lazily. Not mounted is not an error.
func unmountPath(p string) error {
	for i := 0; i < 16; i++ {
		mounted, err := isMountPoint(p)
		if err != nil {
			return err
		}
		if !mounted {
			return nil
		}
		err = unix.Unmount(p, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(p, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted", p)
}

// The FIFREEZE and FITHAW ioctls, _IOWR('X', 119/120, int).
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

// freeze blocks writes to the file system mounted at mp and flushes it, so
// that its image can be copied consistently; the returned func thaws it.
func freeze(mp string) (func(), error) {
	f, err := os.Open(mp)
	if err != nil {
		return nil, errors.Join(errdefs.ErrUnavailable, err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlFIFREEZE, 0); errno != 0 {
		f.Close()
		return nil, fmt.Errorf("freeze %s: %w", mp, errors.Join(errdefs.ErrUnavailable, errno))
	}
	return func() {
		_, _, _ = unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlFITHAW, 0)
		f.Close()
	}, nil
}

// sparseCopy copies src to a new file dst, copying only the data extents
// (holes stay holes), with copy_file_range.
func sparseCopy(ctx context.Context, src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return errors.Join(errdefs.ErrUnavailable, err)
	}
	err = func() error {
		if err := out.Truncate(st.Size()); err != nil {
			return err
		}
		size := st.Size()
		for off := int64(0); off < size; {
			if err := ctx.Err(); err != nil {
				return err
			}
			data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
			if errors.Is(err, unix.ENXIO) {
				return nil // only a hole remains
			}
			if err != nil {
				return err
			}
			hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
			if err != nil {
				return err
			}
			if err := copyRange(in, out, data, hole-data); err != nil {
				return err
			}
			off = hole
		}
		return nil
	}()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, errors.Join(errdefs.ErrUnavailable, err))
	}
	return nil
}

func copyRange(in, out *os.File, off, n int64) error {
	roff, woff := off, off
	for n > 0 {
		c, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, int(min(n, 1<<30)), 0)
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
			return copyRangeRW(in, out, roff, n)
		}
		if err != nil {
			return err
		}
		if c == 0 {
			return io.ErrUnexpectedEOF
		}
		n -= int64(c)
	}
	return nil
}

func copyRangeRW(in, out *os.File, off, n int64) error {
	buf := make([]byte, 1<<20)
	for n > 0 {
		c, err := in.ReadAt(buf[:min(n, int64(len(buf)))], off)
		if c > 0 {
			if _, werr := out.WriteAt(buf[:c], off); werr != nil {
				return werr
			}
			off += int64(c)
			n -= int64(c)
		}
		if err != nil && !(errors.Is(err, io.EOF) && n == 0) {
			return err
		}
	}
	return nil
}
