package doctor

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

func checks(c *Config) []check {
	cs := []check{checkRoot}
	switch c.Driver {
	case "runc":
		cs = append(cs, checkRunc)
	default:
		cs = append(cs, checkRunsc)
	}
	if c.EnvdPath != "" {
		cs = append(cs, checkEnvd)
	}
	return append(cs, checkCgroups, checkNetNS, checkNftables, checkIPForward, checkLoop, checkFilesystems, checkMkfs, checkSeccomp, checkDisk)
}

func isRoot() bool { return os.Geteuid() == 0 }

func checkRoot(ctx context.Context, c *Config) Result {
	if isRoot() {
		return ok("root", "running as root")
	}
	return fail("root", fmt.Sprintf("running as uid %d; the node agent creates cgroups, network namespaces and mounts, which needs root", os.Geteuid()),
		"run the node agent (and this check) as root, e.g. with sudo")
}

// staticBinary reports whether the ELF file at path has no program
// interpreter (is statically linked).
func staticBinary(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

func runFor(ctx context.Context, c *Config, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(bytes.TrimSpace(out)), err
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func checkRunsc(ctx context.Context, c *Config) Result {
	const name = "runsc"
	path, err := exec.LookPath(c.RunscPath)
	if err != nil {
		return fail(name, fmt.Sprintf("runsc (gVisor) not found at %q: %v", c.RunscPath, err),
			"build the pinned runsc with `make bin/runsc` (CGO_ENABLED=0) and point the node at it (--runsc-path), or install a static runsc in PATH")
	}
	static, err := staticBinary(path)
	if err != nil {
		return fail(name, fmt.Sprintf("%s is not a readable executable: %v", path, err), "rebuild it with `make bin/runsc`")
	}
	if !static {
		return fail(name, fmt.Sprintf("%s is dynamically linked; runsc then fails at every start (\"error executing umounter\") because its own chroot has no ld.so", path),
			"rebuild it statically: `make bin/runsc` (or CGO_ENABLED=0 go build gvisor.dev/gvisor/runsc)")
	}
	out, err := runFor(ctx, c, path, "--version")
	if err != nil {
		return fail(name, fmt.Sprintf("`%s --version` failed: %v: %s", path, err, firstLine(out)), "rebuild it with `make bin/runsc`")
	}
	return ok(name, fmt.Sprintf("%s: %s", path, firstLine(out)))
}

func checkRunc(ctx context.Context, c *Config) Result {
	const name = "runc"
	path, err := exec.LookPath(c.RuncPath)
	if err != nil {
		return fail(name, fmt.Sprintf("runc not found at %q: %v", c.RuncPath, err), "apt-get install runc")
	}
	out, err := runFor(ctx, c, path, "--version")
	if err != nil {
		return fail(name, fmt.Sprintf("`%s --version` failed: %v: %s", path, err, firstLine(out)), "reinstall it: apt-get install --reinstall runc")
	}
	return ok(name, fmt.Sprintf("%s: %s", path, firstLine(out)))
}

func checkEnvd(ctx context.Context, c *Config) Result {
	const name = "envd"
	fi, err := os.Stat(c.EnvdPath)
	if err != nil {
		return fail(name, fmt.Sprintf("envd binary %s: %v", c.EnvdPath, err), "build it with `make bin/envd` and point the node at it (--envd-path)")
	}
	if fi.Mode()&0o111 == 0 {
		return fail(name, fmt.Sprintf("%s is not executable (mode %v)", c.EnvdPath, fi.Mode()), "chmod 0755 "+c.EnvdPath)
	}
	static, err := staticBinary(c.EnvdPath)
	if err != nil {
		return fail(name, fmt.Sprintf("%s is not an ELF executable: %v", c.EnvdPath, err), "rebuild it with `make bin/envd`")
	}
	if !static {
		return fail(name, fmt.Sprintf("%s is dynamically linked; it runs inside sandboxes whose root filesystems may lack its libraries", c.EnvdPath),
			"rebuild it statically: `make bin/envd` (CGO_ENABLED=0)")
	}
	return ok(name, c.EnvdPath+" (static)")
}

// cgroupMounts reads the cgroup mounts of mountinfo: v1 controllers by
// name, and the v2 mount point ("" if none).
func cgroupMounts(mountinfo string) (v1 map[string]string, v2 string, err error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	v1 = map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, found := strings.Cut(sc.Text(), " - ")
		if !found {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch qf[0] {
		case "cgroup2":
			if v2 == "" {
				v2 = pf[4]
			}
		case "cgroup":
			for _, o := range strings.Split(qf[2], ",") {
				v1[o] = pf[4]
			}
		}
	}
	return v1, v2, sc.Err()
}

var neededControllers = []string{"cpu", "cpuacct", "memory", "pids", "freezer"}

func checkCgroups(ctx context.Context, c *Config) Result {
	const name = "cgroups"
	v1, v2, err := cgroupMounts(filepath.Join(c.ProcRoot, "self", "mountinfo"))
	if err != nil {
		return fail(name, fmt.Sprintf("cannot read the mount table: %v", err), "mount /proc")
	}
	if v2 != "" {
		if b, err := os.ReadFile(filepath.Join(v2, "cgroup.controllers")); err == nil {
			have := strings.Fields(string(b))
			var missing []string
			for _, n := range []string{"cpu", "memory", "pids"} {
				if !slices.Contains(have, n) {
					missing = append(missing, n)
				}
			}
			if len(missing) == 0 {
				return ok(name, fmt.Sprintf("cgroup v2 at %s with cpu, memory, pids", v2))
			}
			if len(v1) == 0 {
				return fail(name, fmt.Sprintf("cgroup v2 at %s lacks the controllers %s", v2, strings.Join(missing, ", ")),
					"enable them in the root cgroup (echo +cpu +memory +pids > "+filepath.Join(v2, "cgroup.subtree_control")+"), or boot with systemd.unified_cgroup_hierarchy=1")
			}
		}
	}
	var missing []string
	for _, n := range neededControllers {
		if _, ok := v1[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(v1) == 0 && v2 == "" {
		return fail(name, "no cgroup file system is mounted", "mount cgroup2 at /sys/fs/cgroup (mount -t cgroup2 none /sys/fs/cgroup) or let systemd do it")
	}
	if len(missing) > 0 {
		return fail(name, fmt.Sprintf("cgroup v1 controllers %s are not mounted", strings.Join(missing, ", ")),
			"mount each one, e.g. mkdir -p /sys/fs/cgroup/memory && mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory")
	}
	return ok(name, "cgroup v1 controllers "+strings.Join(neededControllers, ", "))
}

func checkNetNS(ctx context.Context, c *Config) Result {
	const name = "netns"
	if _, err := os.Stat(filepath.Join(c.ProcRoot, "self", "ns", "net")); err != nil {
		return fail(name, "the kernel has no network namespaces (/proc/self/ns/net missing)", "use a kernel built with CONFIG_NET_NS=y")
	}
	if !isRoot() {
		return warn(name, "not checked: creating a network namespace needs root", "run this check as root")
	}
	errc := make(chan error, 1)
	go func() {
		// The thread enters a new namespace and is thrown away with it.
		runtime.LockOSThread()
		errc <- unix.Unshare(unix.CLONE_NEWNET)
	}()
	if err := <-errc; err != nil {
		return fail(name, fmt.Sprintf("cannot create a network namespace: %v", err),
			"run as root outside a restricting container (the node needs CAP_SYS_ADMIN and CAP_NET_ADMIN)")
	}
	return ok(name, "network namespaces can be created")
}

func checkNftables(ctx context.Context, c *Config) Result {
	const name = "nftables"
	if !isRoot() {
		return warn(name, "not checked: talking to nf_tables needs root", "run this check as root")
	}
	conn, err := nftables.New()
	if err == nil {
		_, err = conn.ListTables()
		_ = conn.CloseLasting()
	}
	if err != nil {
		return fail(name, fmt.Sprintf("the kernel's nf_tables does not answer: %v", err),
			"load it (modprobe nf_tables nft_nat nft_masq nft_ct) or use a kernel with CONFIG_NF_TABLES; the nftables package gives the nft tool for debugging")
	}
	return ok(name, "nf_tables answers over netlink")
}

func checkIPForward(ctx context.Context, c *Config) Result {
	const name = "ip_forward"
	b, err := os.ReadFile(filepath.Join(c.ProcRoot, "sys", "net", "ipv4", "ip_forward"))
	if err != nil {
		return warn(name, fmt.Sprintf("cannot read net.ipv4.ip_forward: %v", err), "mount /proc")
	}
	if strings.TrimSpace(string(b)) != "1" {
		return warn(name, "net.ipv4.ip_forward is 0: sandboxes with internet access get no outbound traffic until it is on",
			"sysctl -w net.ipv4.ip_forward=1 (and persist it in /etc/sysctl.d/)")
	}
	return ok(name, "net.ipv4.ip_forward=1")
}

func checkLoop(ctx context.Context, c *Config) Result {
	const name = "loop devices"
	p := filepath.Join(c.DevRoot, "loop-control")
	fi, err := os.Stat(p)
	if err != nil {
		return fail(name, fmt.Sprintf("%s is missing: sandbox disks (size-limited writable layers) are loop-mounted images", p),
			"modprobe loop (or use a kernel with CONFIG_BLK_DEV_LOOP); in a container, pass /dev/loop-control and /dev/loop* through")
	}
	if fi.Mode()&os.ModeCharDevice == 0 {
		return fail(name, p+" is not a character device", "recreate it: mknod "+p+" c 10 237")
	}
	return ok(name, p+" present")
}

// kernelFilesystems reads /proc/filesystems.
func kernelFilesystems(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			out = append(out, f[len(f)-1])
		}
	}
	return out, nil
}

func checkFilesystems(ctx context.Context, c *Config) Result {
	const name = "kernel file systems"
	have, err := kernelFilesystems(filepath.Join(c.ProcRoot, "filesystems"))
	if err != nil {
		return fail(name, fmt.Sprintf("cannot read the kernel's file systems: %v", err), "mount /proc")
	}
	var missing []string
	for _, fs := range []string{"overlay", "ext4", "tmpfs"} {
		if !slices.Contains(have, fs) {
			missing = append(missing, fs)
		}
	}
	if len(missing) > 0 {
		return fail(name, "the kernel lacks the file systems "+strings.Join(missing, ", ")+" (overlay: shared template roots; ext4: sandbox disks)",
			"modprobe "+strings.Join(missing, " ")+" (or use a kernel with CONFIG_OVERLAY_FS and CONFIG_EXT4_FS)")
	}
	return ok(name, "overlay, ext4, tmpfs")
}

func checkMkfs(ctx context.Context, c *Config) Result {
	const name = "mkfs.ext4"
	p, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return fail(name, "mkfs.ext4 not found: sandbox disks are formatted as ext4", "apt-get install e2fsprogs")
	}
	return ok(name, p)
}

func checkSeccomp(ctx context.Context, c *Config) Result {
	const name = "seccomp"
	b, err := os.ReadFile(filepath.Join(c.ProcRoot, "self", "status"))
	if err != nil {
		return fail(name, fmt.Sprintf("cannot read /proc/self/status: %v", err), "mount /proc")
	}
	if !bytes.Contains(b, []byte("\nSeccomp:")) {
		return fail(name, "the kernel has no seccomp: gVisor's systrap platform and the runtimes' syscall filters need it",
			"use a kernel with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER")
	}
	return ok(name, "seccomp filters available")
}

func checkDisk(ctx context.Context, c *Config) Result {
	const name = "disk space"
	dir := c.DataDir
	for {
		if _, err := os.Stat(dir); err == nil || dir == "/" || dir == "." {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fail(name, fmt.Sprintf("%s: %v", dir, err), "make the data directory accessible to root")
		}
		dir = filepath.Dir(dir)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fail(name, fmt.Sprintf("statfs %s: %v", dir, err), "make the data directory accessible to root")
	}
	free := st.Bavail * uint64(st.Bsize)
	detail := fmt.Sprintf("%s free on the file system of %s (%s needed)", human(free), c.DataDir, human(c.MinFreeDiskBytes))
	if free < c.MinFreeDiskBytes {
		return fail(name, detail, "free space there, or point the node at a larger disk (--data-dir)")
	}
	return ok(name, detail)
}

func human(b uint64) string {
	const gib = 1 << 30
	if b >= gib {
		return fmt.Sprintf("%.1f GiB", float64(b)/gib)
	}
	return fmt.Sprintf("%d MiB", b>>20)
}
