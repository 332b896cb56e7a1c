// Package doctor checks that a host can run Warren's node agent: the
// runtime (runsc, or runc), cgroups, network namespaces, nftables, loop
// devices, disk space and the kernel features the sandboxes need. Each
// failed check says exactly what is missing and how to fix it.
//
// `warren doctor` prints the results of Run; the node agent may run the
// same checks at start.
package doctor

import (
	"context"
	"fmt"
	"time"
)

// Status is the outcome of one check.
type Status string

// The outcomes. A warning does not stop the node, a failure does.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Result is what one check found.
type Result struct {
	// Name is the check's short name, e.g. "runsc", "cgroups".
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Detail says what was found, or exactly what is missing.
	Detail string `json:"detail"`
	// Fix says how to fix a warning or failure; empty when OK.
	Fix string `json:"fix,omitempty"`
}

func (r Result) String() string {
	s := fmt.Sprintf("[%s] %s: %s", r.Status, r.Name, r.Detail)
	if r.Fix != "" {
		s += "\n       fix: " + r.Fix
	}
	return s
}

// Config says what to check. Zero fields take the defaults.
type Config struct {
	// Driver is the runtime driver the node will use: "runsc" (default)
	// or "runc".
	Driver string
	// RunscPath is the runsc binary; default "runsc" looked up in PATH.
	RunscPath string
	// RuncPath is the runc binary; default "runc" looked up in PATH.
	RuncPath string
	// EnvdPath, when set, is the envd binary to check.
	EnvdPath string
	// DataDir is where the node keeps sandboxes; default /var/lib/warren.
	DataDir string
	// MinFreeDiskBytes is the free space DataDir needs; default 5 GiB.
	MinFreeDiskBytes uint64
	// ProcRoot, SysRoot and DevRoot locate /proc, /sys and /dev (tests
	// point them at fakes).
	ProcRoot, SysRoot, DevRoot string
	// Timeout bounds each check that runs a program; default 20 s.
	Timeout time.Duration
}

func (c *Config) setDefaults() {
	if c.Driver == "" {
		c.Driver = "runsc"
	}
	if c.RunscPath == "" {
		c.RunscPath = "runsc"
	}
	if c.RuncPath == "" {
		c.RuncPath = "runc"
	}
	if c.DataDir == "" {
		c.DataDir = "/var/lib/warren"
	}
	if c.MinFreeDiskBytes == 0 {
		c.MinFreeDiskBytes = 5 << 30
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.SysRoot == "" {
		c.SysRoot = "/sys"
	}
	if c.DevRoot == "" {
		c.DevRoot = "/dev"
	}
	if c.Timeout == 0 {
		c.Timeout = 20 * time.Second
	}
}

// check is one host check.
type check func(ctx context.Context, c *Config) Result

// Run runs every check and returns their results in a fixed order.
func Run(ctx context.Context, cfg Config) []Result {
	cfg.setDefaults()
	var out []Result
	for _, ch := range checks(&cfg) {
		out = append(out, ch(ctx, &cfg))
	}
	return out
}

// Failed reports whether any result is a failure.
func Failed(rs []Result) bool {
	for _, r := range rs {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

func ok(name, detail string) Result { return Result{Name: name, Status: OK, Detail: detail} }

func fail(name, detail, fix string) Result {
	return Result{Name: name, Status: Fail, Detail: detail, Fix: fix}
}

func warn(name, detail, fix string) Result {
	return Result{Name: name, Status: Warn, Detail: detail, Fix: fix}
}
