// Package oci turns a driver.Spec into an OCI runtime bundle (config.json
// plus the small files it bind-mounts) and holds what the OCI-runtime drivers
// (runsc, runc) share: a command-line client for a runtime binary, the
// process description for exec, the cgroup reading that detects an
// out-of-memory kill, and Runtime, the half of a driver that does not depend
// on the runtime binary (sandbox records, exit bookkeeping, and the
// driver.Driver methods whose logic runc and runsc share).
//
// Bundle layout, in driver.Spec.BundleDir:
//
//	config.json   the OCI runtime spec (root.path = Spec.RootFS)
//	hostname      bind-mounted read-only at /etc/hostname
//	hosts         bind-mounted read-only at /etc/hosts
//	resolv.conf   bind-mounted read-only at /etc/resolv.conf
//	exec/         process.json files of running execs (removed after use)
package oci

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// MaxRlimit is the highest rlimit a spec may ask for: root on the
// development hosts (containers themselves) lacks CAP_SYS_RESOURCE and
// cannot raise a hard limit above 20000, so a spec asking more fails to
// start.
const MaxRlimit = 20000

// DefaultPath is the PATH given to processes whose environment has none.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Options tune the generated spec for one runtime.
type Options struct {
	// CgroupsPath is linux.cgroupsPath; required (runc otherwise nests the
	// container under the caller's own cgroup).
	CgroupsPath string
	// DefaultPids is the pids limit when Spec.Resources.Pids is 0; 0 means
	// no limit.
	DefaultPids int64
	// CgroupNamespace adds a cgroup namespace and a read-only /sys/fs/cgroup
	// (runc; gVisor virtualises cgroups itself).
	CgroupNamespace bool
	// InitCaps are capabilities the init process (envd) holds beyond the
	// default set; processes it starts do not inherit them when envd drops
	// them from its bounding set (runsc: CAP_SYS_RESOURCE, so that envd is
	// exempt from the guest's task limit it sets for everything else).
	InitCaps []string
	// HostPids replaces the pids limit of the host cgroup computed from
	// Spec.Resources.Pids and DefaultPids (runsc: the wall above the
	// guest's own limit); 0 keeps it.
	HostPids int64
}

// defaultCaps are the capabilities of every sandbox process: the usual
// container set, so that init (envd) can run commands as other users and
// sudo works inside; nothing that reaches the host kernel's administration.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// Validate checks the parts of a driver spec that every OCI driver needs.
func Validate(s driver.Spec) error {
	switch {
	case !sandbox.ValidID(s.ID):
		return fmt.Errorf("sandbox %q: bad ID: %w", s.ID, errdefs.ErrInvalid)
	case !filepath.IsAbs(s.BundleDir):
		return fmt.Errorf("sandbox %q: bundle dir %q is not absolute: %w", s.ID, s.BundleDir, errdefs.ErrInvalid)
	case !filepath.IsAbs(s.RootFS):
		return fmt.Errorf("sandbox %q: rootfs %q is not absolute: %w", s.ID, s.RootFS, errdefs.ErrInvalid)
	case len(s.Init.Args) == 0:
		return fmt.Errorf("sandbox %q: init has no args: %w", s.ID, errdefs.ErrInvalid)
	}
	for _, m := range s.Mounts {
		if !filepath.IsAbs(m.Destination) {
			return fmt.Errorf("sandbox %q: mount destination %q is not absolute: %w", s.ID, m.Destination, errdefs.ErrInvalid)
		}
		if m.Type != "" && m.Type != "bind" && m.Type != "tmpfs" {
			return fmt.Errorf("sandbox %q: mount type %q: %w", s.ID, m.Type, errdefs.ErrInvalid)
		}
	}
	if _, err := ParseUser(s.Init.User); err != nil {
		return fmt.Errorf("sandbox %q: init: %w", s.ID, err)
	}
	return nil
}

// Generate returns the OCI runtime spec for s. The files it bind-mounts
// (hostname, hosts, resolv.conf) are written by WriteBundle.
func Generate(s driver.Spec, o Options) (*specs.Spec, error) {
	if err := Validate(s); err != nil {
		return nil, err
	}
	if o.CgroupsPath == "" {
		return nil, fmt.Errorf("sandbox %q: no cgroups path: %w", s.ID, errdefs.ErrInvalid)
	}
	proc, err := Process(s.Init)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: init: %w", s.ID, err)
	}
	if len(o.InitCaps) > 0 {
		c := proc.Capabilities
		c.Bounding = append(slices.Clip(c.Bounding), o.InitCaps...)
		c.Effective = append(slices.Clip(c.Effective), o.InitCaps...)
		c.Permitted = append(slices.Clip(c.Permitted), o.InitCaps...)
	}
	hostname := s.Hostname
	if hostname == "" {
		hostname = sandbox.HostName(s.ID)
	}

	spec := &specs.Spec{
		Version:  specs.Version,
		Process:  proc,
		Root:     &specs.Root{Path: s.RootFS},
		Hostname: hostname,
		Mounts:   mounts(s, o),
		Linux: &specs.Linux{
			CgroupsPath: o.CgroupsPath,
			Resources:   resources(s.Resources, o),
			Namespaces:  namespaces(s, o),
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
				"/proc/scsi",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
	return spec, nil
}

// Process returns the OCI process for p: args, env (with a default PATH),
// cwd (default "/"), user, capabilities and rlimits. Stdio is not part of it.
func Process(p driver.Process) (*specs.Process, error) {
	if len(p.Args) == 0 {
		return nil, fmt.Errorf("process has no args: %w", errdefs.ErrInvalid)
	}
	user, err := ParseUser(p.User)
	if err != nil {
		return nil, err
	}
	env := append([]string(nil), p.Env...)
	hasPath := false
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			hasPath = true
		}
	}
	if !hasPath {
		env = append(env, DefaultPath)
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = "/"
	}
	caps := append([]string(nil), defaultCaps...)
	return &specs.Process{
		Args: append([]string(nil), p.Args...),
		Env:  env,
		Cwd:  cwd,
		User: user,
		Capabilities: &specs.LinuxCapabilities{
			Bounding:  caps,
			Effective: caps,
			Permitted: caps,
		},
		Rlimits: []specs.POSIXRlimit{
			{Type: "RLIMIT_NOFILE", Hard: MaxRlimit, Soft: MaxRlimit},
		},
		NoNewPrivileges: false, // sudo inside the sandbox must work
	}, nil
}

// ParseUser parses "uid:gid", "uid" or "" (root).
func ParseUser(s string) (specs.User, error) {
	if s == "" {
		return specs.User{}, nil
	}
	uidStr, gidStr, hasGID := strings.Cut(s, ":")
	uid, err := strconv.ParseUint(uidStr, 10, 32)
	if err != nil {
		return specs.User{}, fmt.Errorf("user %q: want uid:gid: %w", s, errdefs.ErrInvalid)
	}
	gid := uid
	if hasGID {
		if gid, err = strconv.ParseUint(gidStr, 10, 32); err != nil {
			return specs.User{}, fmt.Errorf("user %q: want uid:gid: %w", s, errdefs.ErrInvalid)
		}
	}
	return specs.User{UID: uint32(uid), GID: uint32(gid)}, nil
}

// tmpOptions are the mount options of the guest's /tmp, a tmpfs of half
// the guest's memory (guestMB 0: no size). Its files are memory of the
// runtime (gVisor's sentry) or the host kernel, charged to the sandbox's
// cgroup: without a size a full /tmp ends the whole sandbox at the memory
// limit instead of failing a write with ENOSPC.
// bootMemoryMB is the memory s's guest was first booted with.
func bootMemoryMB(s driver.Spec) int64 {
	if s.GuestMemoryMB > 0 {
		return s.GuestMemoryMB
	}
	return s.Resources.MemoryMB
}

func tmpOptions(guestMB int64) []string {
	opts := []string{"nosuid", "nodev", "mode=1777"}
	if guestMB > 0 {
		opts = append(opts, "size="+strconv.FormatInt(max(guestMB/2, 1), 10)+"m")
	}
	return opts
}

func mounts(s driver.Spec, o Options) []specs.Mount {
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	}
	if o.CgroupNamespace {
		ms = append(ms, specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}})
	}
	ms = append(ms,
		specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: tmpOptions(bootMemoryMB(s))},
		specs.Mount{Destination: "/etc/hostname", Type: "bind", Source: filepath.Join(s.BundleDir, HostnameFile), Options: []string{"rbind", "ro"}},
		specs.Mount{Destination: "/etc/hosts", Type: "bind", Source: filepath.Join(s.BundleDir, HostsFile), Options: []string{"rbind", "ro"}},
		specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: filepath.Join(s.BundleDir, ResolvConfFile), Options: []string{"rbind", "ro"}},
	)
	for _, m := range s.Mounts {
		switch m.Type {
		case "tmpfs":
			opts := append([]string{"nosuid", "nodev"}, m.Options...)
			if m.ReadOnly {
				opts = append(opts, "ro")
			}
			ms = append(ms, specs.Mount{Destination: m.Destination, Type: "tmpfs", Source: "tmpfs", Options: opts})
		default:
			// Host paths stay nosuid (and nodev) even though setuid
			// binaries work elsewhere in the sandbox.
			opts := append([]string{"rbind", "nosuid", "nodev"}, m.Options...)
			if m.ReadOnly {
				opts = append(opts, "ro")
			}
			ms = append(ms, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
		}
	}
	return ms
}

func resources(r sandbox.Resources, o Options) *specs.LinuxResources {
	res := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if r.MemoryMB > 0 {
		limit := r.MemoryMB << 20
		res.Memory = &specs.LinuxMemory{Limit: &limit}
	}
	if r.VCPUs > 0 {
		period := uint64(100000)
		quota := int64(r.VCPUs) * int64(period)
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	pids := r.Pids
	if pids == 0 {
		pids = o.DefaultPids
	}
	if o.HostPids > 0 {
		pids = o.HostPids
	}
	if pids > 0 {
		res.Pids = &specs.LinuxPids{Limit: &pids}
	}
	return res
}

func namespaces(s driver.Spec, o Options) []specs.LinuxNamespace {
	ns := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace},
		{Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.MountNamespace},
		{Type: specs.NetworkNamespace, Path: s.NetNSPath},
	}
	if o.CgroupNamespace {
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	return ns
}
