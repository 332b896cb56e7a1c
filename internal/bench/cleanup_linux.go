package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
)

// removeHostObjects removes what a stopped server of the bench leaves on
// the host (a stopped server keeps them for its next start, which never
// comes): its nftables table with its network namespace directory, and its empty cgroup root in every
// hierarchy. Sandboxes must be gone; a cgroup with processes stays.
func removeHostObjects(ctx context.Context, iso hostIsolation, dataDir string) error {
	var errs []error
	if err := unmountUnder(dataDir); err != nil {
		errs = append(errs, err)
	}
	if err := netslot.DeleteTable(netslot.Config{Table: iso.nftTable}); err != nil {
		errs = append(errs, err)
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", iso.cgroupRoot))
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", iso.cgroupRoot)); err == nil {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", iso.cgroupRoot))
	}
	for _, d := range dirs {
		if err := rmdirCgroup(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// endWithParent makes cmd receive SIGTERM when bench dies.
func endWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

// unmountUnder detaches every mount below dir (deepest first), such as
// the runtime's null network namespace a stopped server keeps.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return fmt.Errorf("mounts: %w", err)
	}
	prefix := filepath.Clean(dir) + "/"
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		// /proc/self/mounts escapes spaces and the like as octal.
		mp := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(f[1])
		if strings.HasPrefix(mp, prefix) {
			points = append(points, mp)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// rmdirCgroup removes a cgroup directory and its child cgroups, deepest
// first (cgroupfs directories are removed with rmdir, not unlink).
func rmdirCgroup(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := rmdirCgroup(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cgroup %s: %w", dir, errors.Join(errdefs.ErrConflict, err))
	}
	return nil
}
