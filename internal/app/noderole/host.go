package noderole

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/hostlock"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
)

// Host are the settings of a machine's node agent, warren node's and
// warren serve's alike: the data dir, the runtime and its binaries, the
// host objects sandboxes are made of, templates and the agent's tuning.
type Host struct {
	// DataDir holds the node's state and templates (and warren serve's
	// SQLite database) (default ./var/data).
	DataDir string
	// Driver is runsc (default), runc or fake.
	Driver string
	// RunscPath, RuncPath and EnvdPath locate the binaries.
	RunscPath string
	RuncPath  string
	EnvdPath  string
	// CgroupRoot is the cgroup under which sandboxes' cgroups live
	// (default "warren"; template build sandboxes use CgroupRoot-build,
	// and their runtime state lives under DataDir/builder); Net configures
	// the network slot pool (CIDR, nftables table, interface prefix). Two
	// servers on one host need different ones.
	CgroupRoot string
	Net        netslot.Config
	// BaseRootFSTar is a pre-built root filesystem for the base template.
	BaseRootFSTar string
	// CodeInterpreterRootFSTar, when the file exists, is the root
	// filesystem tar of the code-interpreter-v1 system template.
	CodeInterpreterRootFSTar string
	// MCPGatewayRootFSTar, when the file exists, is the root filesystem
	// tar of the mcp-gateway system template.
	MCPGatewayRootFSTar string
	// Node tunes the node agent; zero fields keep its defaults.
	Node Tuning
	// TemplateGCInterval is the time between two runs of the template
	// garbage collector (default 1h; negative disables it).
	TemplateGCInterval time.Duration
	// TemplateGCGrace is how long the collector keeps a build nothing
	// needs any more before freeing it (default 15 min).
	TemplateGCGrace time.Duration
	// MaxTemplateDiskMB is the largest disk a template build may ask for
	// (default 65536 MiB).
	MaxTemplateDiskMB int64
	// Builds bound the node's template builds: slots, a team's default
	// share and queue, steps, a build's time (builder.BuildLimits);
	// BuildStepTimeout one RUN step. Zero fields keep the defaults.
	Builds           builder.BuildLimits
	BuildStepTimeout time.Duration
	// EgressProxy tunes the node's egress proxy.
	EgressProxy EgressProxyConfig
}

// Tuning are the node agent's knobs that the roles expose as flags.
type Tuning struct {
	// WatchdogInterval is the mean interval between two health probes of
	// a running sandbox (jittered ±25 %); negative disables the watchdog.
	WatchdogInterval time.Duration
	// PoolConcurrency bounds how many warm pool members are made at once.
	PoolConcurrency int
	// MetricsRetention is how long per-sandbox metric samples are kept.
	MetricsRetention time.Duration
	// BackstopGrace is how long after a sandbox's end time the node stops
	// it by itself (docs/lifecycle.md §2); zero keeps the node's default.
	BackstopGrace time.Duration
	// CountKills has the agent count its kills in sandbox_killed_total
	// (warren node; warren serve's control plane counts them).
	CountKills bool
}

// apply sets the tuned fields of a node agent's configuration.
func (t Tuning) apply(c *node.Config) {
	switch {
	case t.WatchdogInterval < 0:
		c.WatchdogMin = -1
	case t.WatchdogInterval > 0:
		c.WatchdogMin, c.WatchdogMax = t.WatchdogInterval*3/4, t.WatchdogInterval*5/4
	}
	if t.PoolConcurrency > 0 {
		c.PoolConcurrency = t.PoolConcurrency
	}
	if t.MetricsRetention > 0 {
		c.MetricsRetention = t.MetricsRetention
	}
	if t.BackstopGrace != 0 {
		c.BackstopGrace = t.BackstopGrace
	}
	c.CountKills = t.CountKills
}

// SetDefaults fills the defaults, refuses what cannot work and makes
// relative paths absolute.
func (h *Host) SetDefaults() error {
	if h.DataDir == "" {
		h.DataDir = filepath.Join("var", "data")
	}
	if h.Driver == "" {
		h.Driver = "runsc"
	}
	if h.CgroupRoot == "" {
		h.CgroupRoot = "warren"
	}
	switch h.Driver {
	case "runsc", "runc", "fake":
	default:
		return fmt.Errorf("driver %q: must be runsc, runc or fake: %w", h.Driver, errdefs.ErrInvalid)
	}
	if err := h.EgressProxy.check(); err != nil {
		return err
	}
	return h.absPaths()
}

// absPaths resolves the configuration's relative paths against the
// working directory once, at start, so that every part (the driver's OCI
// bundles, the node's state, the builder) gets absolute ones. A binary
// given as a bare name (no '/') is left for PATH lookup.
func (h *Host) absPaths() error {
	for _, p := range []struct {
		name   string
		v      *string
		binary bool
	}{
		{"data dir", &h.DataDir, false},
		{"base rootfs", &h.BaseRootFSTar, false},
		{"runsc", &h.RunscPath, true},
		{"runc", &h.RuncPath, true},
		{"envd", &h.EnvdPath, false},
	} {
		if *p.v == "" || filepath.IsAbs(*p.v) || p.binary && !strings.Contains(*p.v, "/") {
			continue
		}
		abs, err := filepath.Abs(*p.v)
		if err != nil {
			return fmt.Errorf("%s %q: %w", p.name, *p.v, err)
		}
		*p.v = abs
	}
	return nil
}

// Lock makes the data dir private and takes the host names this node
// makes host objects under, for as long as sys runs: no other instance
// on the host may use them at the same time (see hostlock).
func (h *Host) Lock(sys *app.System) error {
	if err := privateDataDir(h.DataDir, sys.Logger); err != nil {
		return err
	}
	locks, err := hostlock.Acquire(hostlock.DefaultDir, h.names())
	if err != nil {
		return err
	}
	sys.OnClose("host locks", locks.Release)
	return nil
}

// names are the host names of Lock.
func (h *Host) names() []hostlock.Name {
	names := []hostlock.Name{{Kind: "data dir", Flag: "--data-dir", Value: h.DataDir, Path: true}}
	if h.Driver == "fake" {
		return names // no host objects
	}
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	cidr := netslot.DefaultCIDR.String()
	if h.Net.CIDR.IsValid() {
		cidr = h.Net.CIDR.Masked().String()
	}
	return append(names,
		hostlock.Name{Kind: "cgroup root", Flag: "--cgroup-root", Value: h.CgroupRoot},
		hostlock.Name{Kind: "nftables table", Flag: "--nft-table", Value: or(h.Net.Table, "warren")},
		hostlock.Name{Kind: "veth prefix", Flag: "--veth-prefix", Value: or(h.Net.IfPrefix, "wr")},
		hostlock.Name{Kind: "address range", Flag: "--net-cidr", Value: cidr},
		hostlock.Name{Kind: "netns dir", Flag: "--netns-dir", Value: or(h.Net.NetNSDir, filepath.Join("/run/warren", or(h.Net.Table, "warren"), "netns"))},
	)
}

// privateDataDir makes the data dir, or narrows an existing one, to mode
// 0700. It holds template trees built from tenants' Dockerfiles, whose
// set-user-ID binaries and file capabilities are kept as built; a data
// dir that other host users may enter (systemd's StateDirectory= and a
// Kubernetes hostPath make 0755 ones) would let any of them run such a
// binary on the host as its owner.
func privateDataDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: narrowing mode %v to 0700: %w", dir, fi.Mode().Perm(), err)
	}
	log.Info("data dir narrowed to its owner", "data_dir", dir, "was", fi.Mode().Perm().String())
	return nil
}
