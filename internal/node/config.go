package node

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/envd/process"
	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// EnvdVersion is the envd protocol version the node reports for its
// sandboxes (the envd it mounts into them).
const EnvdVersion = envdproto.Version

// Defaults of Config.
const (
	DefaultEnvdPort        = envdproto.Port
	DefaultBackstopGrace   = 2 * time.Minute
	DefaultReclaimInterval = 5 * time.Minute
	// DefaultResolvConf is a sandbox's /etc/resolv.conf: public resolvers,
	// since the host's own (often on loopback or a private address) lies
	// in the ranges no sandbox reaches.
	DefaultResolvConf       = "nameserver 8.8.8.8\nnameserver 1.1.1.1\n"
	DefaultReadyTimeout     = 60 * time.Second
	DefaultMinFreeDiskBytes = 1 << 30
	// envdMountPath is where envd's binary is bound, read-only, in every
	// sandbox.
	envdMountPath = "/.warren/envd"
	// startCmdTag is the envd process tag of a template's start command
	// (envd keeps that process's output in the sandbox's log).
	startCmdTag = process.StartCmdTag
)

// Config configures an Agent. Driver, Cgroups, Net and Layers are required.
type Config struct {
	// DataDir holds the per-sandbox directories (state record, OCI bundle,
	// memory snapshot) under DataDir/sandboxes/sbx-<id>/.
	DataDir string
	Driver  driver.Driver
	Cgroups cgroup.Manager
	Net     netslot.Pool
	Layers  Layers
	// Volumes mounts the sandboxes' volumes (volumes.go); nil: the node
	// keeps none, and a create that asks for one is ErrUnsupported.
	Volumes VolumeMounter
	// EnvdPath is the host path of the envd binary bound into sandboxes.
	EnvdPath string
	// EnvdPort is the port envd listens on inside the sandbox (49983).
	EnvdPort int
	// Envd talks to the envds; nil means HTTP (NewHTTPEnvd).
	Envd Envd
	// BackstopGrace is how long after a sandbox's end time the node stops
	// it by itself (docs/lifecycle.md §2); default 2 minutes.
	BackstopGrace time.Duration
	// DefaultResources fill the zero fields of a create's resources.
	DefaultResources sandbox.Resources
	// ReadyTimeout bounds the start of a sandbox: the runtime's start or
	// restore and the wait for its envd; default 60 s.
	ReadyTimeout time.Duration
	// MinFreeDiskBytes is the free space under DataDir below which a pause
	// with memory is refused (ErrExhausted); default 1 GiB. Negative
	// disables the check.
	MinFreeDiskBytes int64
	// FreeDisk reports the free bytes of the file system holding path; nil
	// means statfs.
	FreeDisk func(path string) (uint64, error)
	// ReclaimInterval is how often leaked host objects are looked for
	// after the start-up pass; default 5 minutes, negative disables.
	ReclaimInterval time.Duration
	// Hostname, ResolvConf and Hosts shape every sandbox's network
	// identity; empty means the defaults below.
	Hostname   string
	ResolvConf string
	// WatchdogMin and WatchdogMax bound the jittered interval between two
	// health probes of a running sandbox (docs/lifecycle.md §5); defaults
	// 25 s and 40 s. A negative WatchdogMin disables the watchdog.
	WatchdogMin, WatchdogMax time.Duration
	// ProbeTimeout bounds one health probe; default 5 s.
	ProbeTimeout time.Duration
	// MetricsInterval is how often each running sandbox's CPU, memory and
	// disk use is sampled for getMetrics; default 5 s, negative disables.
	MetricsInterval time.Duration
	// MetricsRetention is how long samples are kept; default 1 hour.
	MetricsRetention time.Duration
	// KeepPaused bounds the paused sandboxes whose host objects (network
	// slot, cgroup, root filesystem's mount, and a runtime container made
	// ready for the restore) stay after a pause with memory, so that a
	// resume only restores memory (keep.go): the KeepPaused most recently
	// paused, each for at most KeepPausedFor, and none while the host's
	// available memory is below KeepPausedMinFreeMemory. Defaults 8, 10
	// minutes and 1 GiB; a negative KeepPaused keeps none. Only a driver
	// that is a driver.RestorePreparer keeps any.
	KeepPaused              int
	KeepPausedFor           time.Duration
	KeepPausedMinFreeMemory int64
	// FreeMemory reports the host's available memory in bytes; nil means
	// MemAvailable of /proc/meminfo.
	FreeMemory func() (uint64, error)
	// PoolConcurrency bounds how many warm pool members are made at once;
	// default 2 (pool.go).
	PoolConcurrency int
	// SnapshotRuntime names the runtime's build and platform in what a
	// template snapshot records of its host (nodeapi.SnapshotHost.Runtime),
	// for another node to tell whether it can restore it; empty: the
	// agent's template snapshots do not travel.
	SnapshotRuntime string
	// CPUInfo is the file the host's CPU flags are read from; default
	// /proc/cpuinfo.
	CPUInfo string
	// Registry receives the agent's metrics; nil registers nothing.
	Registry prometheus.Registerer
	// CountKills registers sandbox_killed_total{kill_reason} on Registry:
	// every kill the agent carries out, by reason (kills.go). `warren
	// node` sets it; under `warren serve` the control plane's counter of
	// that name, on the same registry, counts every kill.
	CountKills bool
	Logger     *slog.Logger
	// Clock is the time source; nil means the real clock.
	Clock Clock
}

func (c *Config) setDefaults() error {
	if c.DataDir == "" {
		return fmt.Errorf("node config: data dir: %w", errdefs.ErrInvalid)
	}
	if c.Driver == nil || c.Cgroups == nil || c.Net == nil || c.Layers == nil {
		return fmt.Errorf("node config: driver, cgroups, net and layers are required: %w", errdefs.ErrInvalid)
	}
	if c.EnvdPort == 0 {
		c.EnvdPort = DefaultEnvdPort
	}
	if c.Envd == nil {
		c.Envd = NewHTTPEnvd(nil)
	}
	if c.BackstopGrace == 0 {
		c.BackstopGrace = DefaultBackstopGrace
	}
	if c.BackstopGrace < 0 {
		return fmt.Errorf("node config: backstop grace %s: %w", c.BackstopGrace, errdefs.ErrInvalid)
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.MinFreeDiskBytes == 0 {
		c.MinFreeDiskBytes = DefaultMinFreeDiskBytes
	}
	if c.FreeDisk == nil {
		c.FreeDisk = freeDisk
	}
	if c.ReclaimInterval == 0 {
		c.ReclaimInterval = DefaultReclaimInterval
	}
	if err := c.watchdogDefaults(); err != nil {
		return err
	}
	if err := c.samplesDefaults(); err != nil {
		return err
	}
	if err := c.keepDefaults(); err != nil {
		return err
	}
	if c.PoolConcurrency <= 0 {
		c.PoolConcurrency = DefaultPoolConcurrency
	}
	if c.Hostname == "" {
		c.Hostname = "e2b.local"
	}
	if c.ResolvConf == "" {
		c.ResolvConf = DefaultResolvConf
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.CPUInfo == "" {
		c.CPUInfo = "/proc/cpuinfo"
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	r := &c.DefaultResources
	if r.VCPUs == 0 {
		r.VCPUs = 2
	}
	if r.MemoryMB == 0 {
		r.MemoryMB = 512
	}
	if r.DiskMB == 0 {
		r.DiskMB = 1024
	}
	if r.Pids == 0 {
		r.Pids = 1024
	}
	return nil
}
