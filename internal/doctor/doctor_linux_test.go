package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/testenv"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func find(t *testing.T, rs []Result, name string) Result {
	t.Helper()
	for _, r := range rs {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no %q check in %v", name, rs)
	return Result{}
}

// A host with nothing: every check fails or warns and says how to fix it.
func TestBrokenHost(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	proc, dev := filepath.Join(root, "proc"), filepath.Join(root, "dev")
	write(t, filepath.Join(proc, "self", "mountinfo"), "22 1 0:21 / /proc rw - proc proc rw\n")
	write(t, filepath.Join(proc, "filesystems"), "nodev\ttmpfs\n\text3\n")
	write(t, filepath.Join(proc, "self", "status"), "Name:\tx\nState:\tR\n")
	write(t, filepath.Join(proc, "sys", "net", "ipv4", "ip_forward"), "0\n")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	rs := Run(context.Background(), Config{
		RunscPath: filepath.Join(root, "no-runsc"), EnvdPath: "/bin/ls", DataDir: filepath.Join(root, "data", "deeper"),
		MinFreeDiskBytes: 1 << 62, ProcRoot: proc, DevRoot: dev,
	})
	want := map[string]string{
		"runsc":               "not found",
		"envd":                "dynamically linked",
		"cgroups":             "no cgroup file system",
		"ip_forward":          "ip_forward is 0",
		"loop devices":        "loop-control is missing",
		"kernel file systems": "overlay, ext4",
		"seccomp":             "no seccomp",
		"disk space":          "needed",
		"netns":               "no network namespaces",
	}
	for name, detail := range want {
		r := find(t, rs, name)
		if r.Status == OK || !strings.Contains(r.Detail, detail) || r.Fix == "" {
			t.Errorf("%s: %+v, want a failure saying %q with a fix", name, r, detail)
		}
	}
	if !Failed(rs) {
		t.Error("Failed() = false for a broken host")
	}
	if s := find(t, rs, "runsc").String(); !strings.Contains(s, "fix: build the pinned runsc") {
		t.Errorf("String() = %q", s)
	}
}

func TestDynamicRunsc(t *testing.T) {
	t.Parallel()
	r := checkRunsc(context.Background(), &Config{RunscPath: "/bin/ls", Timeout: 1e10})
	if r.Status != Fail || !strings.Contains(r.Detail, "dynamically linked") || !strings.Contains(r.Fix, "CGO_ENABLED=0") {
		t.Errorf("%+v", r)
	}
}

func TestCgroupMounts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name      string
		mountinfo string
		status    Status
		detail    string
	}{
		{"v1 hybrid", `30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
31 25 0:27 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct
32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
33 25 0:29 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
34 25 0:30 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
35 25 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
`, OK, "v1"},
		{"v1 missing freezer", `30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
33 25 0:29 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
`, Fail, "freezer"},
		{"v2 full", "35 25 0:31 / " + filepath.Join(dir, "full") + " rw - cgroup2 cgroup2 rw\n", OK, "v2"},
		{"v2 lacking memory", "35 25 0:31 / " + filepath.Join(dir, "thin") + " rw - cgroup2 cgroup2 rw\n", Fail, "memory"},
	}
	write(t, filepath.Join(dir, "full", "cgroup.controllers"), "cpuset cpu io memory hugetlb pids rdma\n")
	write(t, filepath.Join(dir, "thin", "cgroup.controllers"), "cpu pids\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := filepath.Join(t.TempDir(), "proc")
			write(t, filepath.Join(proc, "self", "mountinfo"), tt.mountinfo)
			r := checkCgroups(context.Background(), &Config{ProcRoot: proc})
			if r.Status != tt.status || !strings.Contains(r.Detail, tt.detail) || (r.Status != OK && r.Fix == "") {
				t.Errorf("%+v, want %s mentioning %q", r, tt.status, tt.detail)
			}
		})
	}
}

// This host, as root: the checks that depend only on the kernel pass.
func TestThisHost(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "host checks")
	cfg := Config{DataDir: t.TempDir(), MinFreeDiskBytes: 1 << 20}
	if p := os.Getenv("WARREN_RUNSC"); p != "" {
		cfg.RunscPath = p
	}
	rs := Run(context.Background(), cfg)
	for _, r := range rs {
		t.Log(r)
		if r.Status != OK && r.Fix == "" {
			t.Errorf("%s is %s without a fix", r.Name, r.Status)
		}
	}
	for _, name := range []string{"root", "cgroups", "netns", "nftables", "loop devices", "kernel file systems", "seccomp", "disk space"} {
		if r := find(t, rs, name); r.Status != OK {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if p := os.Getenv("WARREN_RUNSC"); p != "" {
		if _, err := os.Stat(p); err == nil {
			if r := find(t, rs, "runsc"); r.Status != OK {
				t.Errorf("runsc at $WARREN_RUNSC: %+v", r)
			}
		}
	}
}
