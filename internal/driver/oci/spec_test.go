package oci

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

func baseSpec(t *testing.T) driver.Spec {
	dir := t.TempDir()
	return driver.Spec{
		ID:         "abc",
		BundleDir:  filepath.Join(dir, "bundle"),
		RootFS:     filepath.Join(dir, "rootfs"),
		Hostname:   "h1",
		ResolvConf: "nameserver 1.1.1.1\n",
		Init:       driver.Process{Args: []string{"/envd"}, User: "1000:1001", Env: []string{"A=b"}},
		Mounts:     []driver.Mount{{Source: "/usr/bin/envd", Destination: "/envd", ReadOnly: true}},
	}
}

func TestGenerate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*driver.Spec)
		opts  Options
		check func(t *testing.T, s *specs.Spec)
	}{
		{
			name: "resources",
			edit: func(s *driver.Spec) { s.Resources = sandbox.Resources{VCPUs: 2, MemoryMB: 512, Pids: 99} },
			opts: Options{CgroupsPath: "/w/sbx-abc"},
			check: func(t *testing.T, s *specs.Spec) {
				r := s.Linux.Resources
				if *r.Memory.Limit != 512<<20 || *r.CPU.Quota != 200000 || *r.CPU.Period != 100000 || *r.Pids.Limit != 99 {
					t.Errorf("resources = mem %d cpu %d/%d pids %d", *r.Memory.Limit, *r.CPU.Quota, *r.CPU.Period, *r.Pids.Limit)
				}
				if s.Linux.CgroupsPath != "/w/sbx-abc" {
					t.Errorf("cgroupsPath = %q", s.Linux.CgroupsPath)
				}
			},
		},
		{
			name: "init caps and host pids (runsc)",
			edit: func(s *driver.Spec) { s.Resources = sandbox.Resources{Pids: 99} },
			opts: Options{CgroupsPath: "/w", InitCaps: []string{"CAP_SYS_RESOURCE"}, HostPids: 652},
			check: func(t *testing.T, s *specs.Spec) {
				c := s.Process.Capabilities
				for _, set := range [][]string{c.Bounding, c.Effective, c.Permitted} {
					if !slices.Contains(set, "CAP_SYS_RESOURCE") || !slices.Contains(set, "CAP_KILL") {
						t.Errorf("init caps = %v", set)
					}
				}
				if *s.Linux.Resources.Pids.Limit != 652 {
					t.Errorf("pids = %d, want the host wall 652", *s.Linux.Resources.Pids.Limit)
				}
			},
		},
		{
			name: "host bind mounts are nosuid",
			opts: Options{CgroupsPath: "/w"},
			check: func(t *testing.T, s *specs.Spec) {
				for _, m := range s.Mounts {
					if m.Destination == "/envd" && !slices.Contains(m.Options, "nosuid") {
						t.Errorf("mount %+v lacks nosuid", m)
					}
				}
				if slices.Contains(s.Process.Capabilities.Bounding, "CAP_SYS_RESOURCE") {
					t.Error("CAP_SYS_RESOURCE without InitCaps")
				}
			},
		},
		{
			name: "default pids and no limits",
			opts: Options{CgroupsPath: "/w", DefaultPids: 4096},
			check: func(t *testing.T, s *specs.Spec) {
				r := s.Linux.Resources
				if r.Memory != nil || r.CPU != nil || r.Pids == nil || *r.Pids.Limit != 4096 {
					t.Errorf("resources = %+v", r)
				}
			},
		},
		{
			name: "process",
			opts: Options{CgroupsPath: "/w"},
			check: func(t *testing.T, s *specs.Spec) {
				p := s.Process
				if p.User.UID != 1000 || p.User.GID != 1001 || p.Cwd != "/" || !slices.Contains(p.Env, DefaultPath) || !slices.Contains(p.Env, "A=b") {
					t.Errorf("process = %+v", p)
				}
				for _, r := range p.Rlimits {
					if r.Hard > MaxRlimit || r.Soft > MaxRlimit {
						t.Errorf("rlimit %s above %d", r.Type, MaxRlimit)
					}
				}
				if s.Hostname != "h1" || s.Root.Path == "" || s.Root.Readonly {
					t.Errorf("hostname %q root %+v", s.Hostname, s.Root)
				}
			},
		},
		{
			name: "mounts",
			edit: func(s *driver.Spec) { s.Resources.MemoryMB = 256 },
			opts: Options{CgroupsPath: "/w"},
			check: func(t *testing.T, s *specs.Spec) {
				byDst := map[string]specs.Mount{}
				for _, m := range s.Mounts {
					byDst[m.Destination] = m
				}
				for _, dst := range []string{"/proc", "/dev", "/dev/shm", "/tmp", "/etc/hosts", "/etc/resolv.conf", "/etc/hostname", "/envd"} {
					if _, ok := byDst[dst]; !ok {
						t.Errorf("no mount at %s", dst)
					}
				}
				if m := byDst["/envd"]; m.Source != "/usr/bin/envd" || !slices.Contains(m.Options, "ro") {
					t.Errorf("envd mount = %+v", m)
				}
				if m := byDst["/tmp"]; m.Type != "tmpfs" || !slices.Contains(m.Options, "size=128m") {
					t.Errorf("/tmp = %+v, want a tmpfs of half the 256 MiB memory", m)
				}
				if _, ok := byDst["/sys/fs/cgroup"]; ok {
					t.Error("cgroup mount without CgroupNamespace")
				}
			},
		},
		{
			name: "tmp sized from the boot memory",
			edit: func(s *driver.Spec) { s.Resources.MemoryMB, s.GuestMemoryMB = 1024, 256 },
			opts: Options{CgroupsPath: "/w"},
			check: func(t *testing.T, s *specs.Spec) {
				for _, m := range s.Mounts {
					if m.Destination == "/tmp" && !slices.Contains(m.Options, "size=128m") {
						t.Errorf("/tmp = %+v, want half the 256 MiB the guest booted with", m)
					}
				}
				if *s.Linux.Resources.Memory.Limit != 1024<<20 {
					t.Errorf("memory limit %d, want the 1024 MiB of Resources", *s.Linux.Resources.Memory.Limit)
				}
			},
		},
		{
			name: "network namespace path",
			edit: func(s *driver.Spec) { s.NetNSPath = "/var/run/netns/x" },
			opts: Options{CgroupsPath: "/w", CgroupNamespace: true},
			check: func(t *testing.T, s *specs.Spec) {
				var net *specs.LinuxNamespace
				hasCgroup := false
				for i, ns := range s.Linux.Namespaces {
					if ns.Type == specs.NetworkNamespace {
						net = &s.Linux.Namespaces[i]
					}
					hasCgroup = hasCgroup || ns.Type == specs.CgroupNamespace
				}
				if net == nil || net.Path != "/var/run/netns/x" || !hasCgroup {
					t.Errorf("namespaces = %+v", s.Linux.Namespaces)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := baseSpec(t)
			if tt.edit != nil {
				tt.edit(&s)
			}
			got, err := Generate(s, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
		})
	}
}

func TestGenerateInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*driver.Spec)
		opts Options
	}{
		{"bad id", func(s *driver.Spec) { s.ID = "A B" }, Options{CgroupsPath: "/w"}},
		{"relative rootfs", func(s *driver.Spec) { s.RootFS = "rootfs" }, Options{CgroupsPath: "/w"}},
		{"relative bundle", func(s *driver.Spec) { s.BundleDir = "b" }, Options{CgroupsPath: "/w"}},
		{"no init", func(s *driver.Spec) { s.Init.Args = nil }, Options{CgroupsPath: "/w"}},
		{"bad user", func(s *driver.Spec) { s.Init.User = "user" }, Options{CgroupsPath: "/w"}},
		{"bad mount type", func(s *driver.Spec) { s.Mounts[0].Type = "nfs" }, Options{CgroupsPath: "/w"}},
		{"no cgroups path", nil, Options{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := baseSpec(t)
			if tt.edit != nil {
				tt.edit(&s)
			}
			if _, err := Generate(s, tt.opts); !errdefs.IsInvalid(err) {
				t.Errorf("Generate = %v, want invalid", err)
			}
		})
	}
}

func TestWriteBundle(t *testing.T) {
	t.Parallel()
	s := baseSpec(t)
	spec, err := Generate(s, Options{CgroupsPath: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteBundle(s, spec); err != nil {
		t.Fatal(err)
	}
	back, err := ReadConfig(s.BundleDir)
	if err != nil {
		t.Fatal(err)
	}
	if back.Hostname != "h1" || back.Root.Path != s.RootFS {
		t.Errorf("config.json round trip = %q %q", back.Hostname, back.Root.Path)
	}
	for name, want := range map[string]string{
		HostnameFile:   "h1\n",
		ResolvConfFile: "nameserver 1.1.1.1\n",
		HostsFile:      DefaultHosts + "127.0.1.1\th1\n",
	} {
		data, err := os.ReadFile(filepath.Join(s.BundleDir, name))
		if err != nil || string(data) != want {
			t.Errorf("%s = %q, %v; want %q", name, data, err, want)
		}
	}
}

func TestIndex(t *testing.T) {
	t.Parallel()
	x := Index{Dir: filepath.Join(t.TempDir(), "idx")}
	if ids, err := x.IDs(); err != nil || len(ids) != 0 {
		t.Fatalf("IDs of a missing dir = %v, %v", ids, err)
	}
	if _, err := x.Get("a"); !errdefs.IsNotFound(err) {
		t.Errorf("Get missing = %v", err)
	}
	r := Record{ID: "a", BundleDir: "/b", CgroupsPath: "/c", Stopped: true, Exit: driver.Exit{Code: 3}}
	if err := x.Put(r); err != nil {
		t.Fatal(err)
	}
	got, err := x.Get("a")
	if err != nil || got.BundleDir != "/b" || !got.Stopped || got.Exit.Code != 3 || got.Version != recordVersion {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if ids, _ := x.IDs(); !slices.Equal(ids, []string{"a"}) {
		t.Errorf("IDs = %v", ids)
	}
	for range 2 {
		if err := x.Remove("a"); err != nil {
			t.Errorf("Remove = %v", err)
		}
	}
	if err := os.WriteFile(filepath.Join(x.Dir, "b.json"), []byte(`{"version":99,"id":"b"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Get("b"); !errdefs.IsUnsupported(err) {
		t.Errorf("Get of a newer record = %v, want unsupported", err)
	}
}

func TestProcessAlive(t *testing.T) {
	t.Parallel()
	if !ProcessAlive(os.Getpid()) {
		t.Error("own process reads as dead")
	}
	if ProcessAlive(0) || ProcessAlive(-1) || ProcessAlive(1<<30) {
		t.Error("impossible PID reads as alive")
	}
}

func TestExitFromCode(t *testing.T) {
	t.Parallel()
	for code, signaled := range map[int]bool{0: false, 1: false, 128: false, 137: true, 143: true, 255: false, -1: false} {
		if got := ExitFromCode(code); got.Code != code || got.Signaled != signaled {
			t.Errorf("ExitFromCode(%d) = %+v", code, got)
		}
	}
}
