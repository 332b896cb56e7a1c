package drivertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// RootFSTarEnv names the tarball of the test root filesystem.
const RootFSTarEnv = "WARREN_TEST_ROOTFS_TAR"

var base struct {
	once sync.Once
	dir  string // unpacked root filesystem, shared read-only
	err  error
}

// cgroupParent is the cgroup under which this test binary's sandboxes go.
var cgroupParent = fmt.Sprintf("/warren-drivertest-%d", os.Getpid())

// Main runs the tests of a package that uses Host and then removes what Host
// shares between tests (the unpacked root filesystem, the cgroup parent).
// Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if base.dir != "" {
		if err := os.RemoveAll(base.dir); err != nil {
			fmt.Fprintf(os.Stderr, "drivertest: remove %s: %v\n", base.dir, err)
		}
	}
	removeCgroupParent()
	os.Exit(code)
}

func removeCgroupParent() {
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		_ = os.Remove(filepath.Join("/sys/fs/cgroup", e.Name(), cgroupParent))
	}
	_ = os.Remove(filepath.Join("/sys/fs/cgroup", cgroupParent))
}

// Host prepares the host side of real sandboxes: an overlay root
// filesystem per sandbox (lower: the unpacked test tarball, shared), a
// bundle directory, a cgroup path and optionally a network namespace.
type Host struct {
	// StateDirs are the driver's state directories; Leftovers reports
	// every entry left in them.
	StateDirs []string

	dir string
	mu  sync.Mutex
	sbx map[string]*hostSandbox // by ID, latest first
}

type hostSandbox struct {
	dir    string // <Host.dir>/<n>
	upper  string
	bundle string
	cgroup string
}

// NewHost checks the prerequisites (root, overlayfs, the root filesystem
// tarball at $WARREN_TEST_ROOTFS_TAR) and unpacks the tarball once per test
// binary. It skips the test when something is missing (fails under CI).
func NewHost(t testing.TB) *Host {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root")
	tarPath := os.Getenv(RootFSTarEnv)
	_, statErr := os.Stat(tarPath)
	Require(t, tarPath != "" && statErr == nil, fmt.Sprintf("needs the test root filesystem tarball at $%s (%q)", RootFSTarEnv, tarPath))
	base.once.Do(func() {
		base.dir, base.err = os.MkdirTemp("", "warren-drivertest-rootfs-")
		if base.err != nil {
			return
		}
		out, err := exec.Command("tar", "-C", base.dir, "--numeric-owner", "-xf", tarPath).CombinedOutput()
		if err != nil {
			base.err = fmt.Errorf("unpack %s: %v: %s", tarPath, err, out)
		}
	})
	if base.err != nil {
		t.Fatal(base.err)
	}
	return &Host{dir: t.TempDir(), sbx: map[string]*hostSandbox{}}
}

// NewSpec implements Harness.NewSpec.
func (h *Host) NewSpec(t testing.TB, o SpecOptions) driver.Spec {
	t.Helper()
	id := o.ID
	if id == "" {
		id = NewID()
	}
	dir, err := os.MkdirTemp(h.dir, "sbx-")
	if err != nil {
		t.Fatal(err)
	}
	hs := &hostSandbox{
		dir:    dir,
		upper:  filepath.Join(dir, "upper"),
		bundle: filepath.Join(dir, "bundle"),
		cgroup: cgroupParent + "/" + sandbox.HostName(id),
	}
	merged := filepath.Join(dir, "rootfs")
	for _, d := range []string{hs.upper, filepath.Join(dir, "work"), merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if o.CloneFrom != nil {
		h.mu.Lock()
		src := h.sbx[o.CloneFrom.ID]
		h.mu.Unlock()
		if src == nil {
			t.Fatalf("CloneFrom: unknown sandbox %s", o.CloneFrom.ID)
		}
		if out, err := exec.Command("cp", "-a", src.upper+"/.", hs.upper+"/").CombinedOutput(); err != nil {
			t.Fatalf("clone writable layer: %v: %s", err, out)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", base.dir, hs.upper, filepath.Join(dir, "work"))
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatalf("mount overlay: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(merged, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", merged, err)
		}
		_ = os.RemoveAll(dir)
	})
	h.mu.Lock()
	h.sbx[id] = hs
	h.mu.Unlock()

	sp := driver.Spec{
		ID:           id,
		BundleDir:    hs.bundle,
		RootFS:       merged,
		Hostname:     "sbx-test",
		ResolvConf:   "nameserver 127.0.0.53\n",
		CgroupParent: hs.cgroup,
	}
	if o.Network {
		sp.NetNSPath = newNetns(t)
	}
	return sp
}

// newNetns makes a network namespace with lo up, removed at clean-up.
func newNetns(t testing.TB) string {
	t.Helper()
	name := "warren-dt-" + sandbox.NewID()[:10]
	for _, args := range [][]string{{"netns", "add", name}, {"-n", name, "link", "set", "lo", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return "/var/run/netns/" + name
}

// Leftovers implements Harness.Leftovers: entries in the state dirs,
// bundles, cgroups and processes that name one of the sandboxes.
func (h *Host) Leftovers(t *testing.T, ids []string) []string {
	t.Helper()
	var left []string
	for _, dir := range h.StateDirs {
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			left = append(left, fmt.Sprintf("state dir %s: %v", dir, err))
		}
		for _, e := range ents {
			left = append(left, "state: "+filepath.Join(dir, e.Name()))
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		hs := h.sbx[id]
		if hs == nil {
			continue
		}
		if _, err := os.Stat(hs.bundle); err == nil {
			left = append(left, "bundle: "+hs.bundle)
		}
		ents, _ := os.ReadDir("/sys/fs/cgroup")
		for _, e := range ents {
			p := filepath.Join("/sys/fs/cgroup", e.Name(), hs.cgroup)
			if _, err := os.Stat(p); err == nil {
				left = append(left, "cgroup: "+p)
			}
		}
	}
	left = append(left, processesNaming(ids)...)
	return left
}

// processesNaming lists host processes whose command line names an ID.
func processesNaming(ids []string) []string {
	var left []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(data), "\x00", " ")
		for _, id := range ids {
			if strings.Contains(cmd, id) {
				left = append(left, fmt.Sprintf("process %d: %s", pid, cmd))
			}
		}
	}
	return left
}
