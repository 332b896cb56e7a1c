package builder

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// sizedScratch mounts a fresh ext4 file system of at least mb MiB at
// dir/disk and returns the mount point: a sparse image file in dir,
// attached to a loop device by mount(8) (which frees the device with the
// mount). A build sandbox's writes land there, so a step that fills it
// gets ENOSPC and fails; the host's disk is not touched beyond the
// image's size. release unmounts it and removes the image; after a crash
// the builder's Cleanup unmounts what is left below its work directory.
func (b *Builder) sizedScratch(ctx context.Context, dir string, mb int64) (mp string, release func() error, err error) {
	img := filepath.Join(dir, "disk.img")
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return "", nil, err
	}
	// ext4's own metadata takes 4-17 %: the image is larger than mb.
	err = f.Truncate((mb + mb/8 + 16) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", nil, fmt.Errorf("build scratch image: %w", err)
	}
	mkfs := b.cfg.Mkfs
	if mkfs == "" {
		mkfs = "mkfs.ext4"
	}
	if out, err := exec.CommandContext(ctx, mkfs, "-q", "-F", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", img).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("build scratch: mkfs.ext4: %s: %w", strings.TrimSpace(string(out)), err)
	}
	mp = filepath.Join(dir, "disk")
	if err := os.Mkdir(mp, 0o700); err != nil {
		return "", nil, err
	}
	if out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev", img, mp).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("build scratch: mount: %s: %w", strings.TrimSpace(string(out)), err)
	}
	release = func() error {
		if _, err := unmount(mp); err != nil {
			return err
		}
		return os.Remove(img)
	}
	return mp, release, nil
}

// copyOut copies the tree src (on the scratch file system) to dst, which
// must not exist, keeping everything overlayfs put there: ownership,
// modes, times, hard links, whiteouts (device nodes 0/0) and extended
// attributes (the opaque marks).
func copyOut(ctx context.Context, src, dst string) error {
	out, err := exec.CommandContext(ctx, "cp", "-a", "--no-target-directory", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copy the step's layer: %s: %w", strings.TrimSpace(string(out)), errdefs.ErrUnavailable)
	}
	return nil
}

// full reports whether the file system at p has no free blocks left.
func full(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && st.Bavail*uint64(st.Bsize) < 1<<20
}
