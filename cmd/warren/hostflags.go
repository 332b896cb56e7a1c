package main

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// hostFlags are the flags of the roles that run a node agent (`warren
// serve`, `warren node`): the data directory, the runtime and its
// binaries, the host objects sandboxes are made of (cgroup root, network
// slots), templates and the agent's tuning.
func hostFlags(f *pflag.FlagSet, cfg *noderole.Host, rebuildBase *bool) {
	f.StringVar(&cfg.DataDir, "data-dir", filepath.Join("var", "data"), "directory for the database, node state and templates")
	f.StringVar(&cfg.Driver, "driver", "runsc", "runtime driver: runsc, runc or fake")
	f.StringVar(&cfg.RunscPath, "runsc", defaultPath("runsc"), "runsc binary")
	f.StringVar(&cfg.RuncPath, "runc", "runc", "runc binary")
	f.StringVar(&cfg.CgroupRoot, "cgroup-root", "warren", "cgroup under which sandbox cgroups are made")
	f.Func("net-cidr", "address range of sandbox network slots (default 100.65.0.0/16)", func(v string) error {
		p, err := netip.ParsePrefix(v)
		cfg.Net.CIDR = p
		return err
	})
	f.StringVar(&cfg.Net.Table, "nft-table", "", "nftables table (family inet) of the sandbox firewall (default warren)")
	f.StringVar(&cfg.Net.IfPrefix, "veth-prefix", "", "1-3 letters starting host-side veth names (default wr)")
	f.StringVar(&cfg.Net.NetNSDir, "netns-dir", "", "directory where sandboxes' network namespaces are mounted (default /run/warren/<nft-table>/netns)")
	f.StringVar(&cfg.EnvdPath, "envd", defaultPath("envd"), "envd binary mounted into sandboxes")
	f.StringVar(&cfg.BaseRootFSTar, "base-rootfs", filepath.Join("var", "base-rootfs.tar"), "pre-built root filesystem tar of the base template")
	f.StringVar(&cfg.CodeInterpreterRootFSTar, "code-interpreter-rootfs", filepath.Join("var", "code-interpreter-rootfs.tar"), "root filesystem tar of the code-interpreter-v1 template (scripts/build-code-interpreter-rootfs.sh); the template is offered when it exists")
	f.StringVar(&cfg.MCPGatewayRootFSTar, "mcp-gateway-rootfs", filepath.Join("var", "mcp-gateway-rootfs.tar"), "root filesystem tar of the mcp-gateway template (scripts/build-mcp-gateway-rootfs.sh); the template is offered when it exists")
	f.BoolVar(rebuildBase, "rebuild-base", false, "make a new build of the base template at this start, even if its tar is unchanged (from --base-rootfs, else a new mmdebstrap run)")
	f.StringArrayVar(&cfg.EgressProxy.Allow, "egress-proxy-allow", nil, "let sandboxes whose network rules name hosts reach this non-public destination through the egress proxy: CIDR or IP (repeatable; by default only public addresses; --egress-allow does not apply to sandboxes)")
	f.StringVar(&cfg.EgressProxy.DNS, "egress-dns", "", "DNS server (HOST:PORT) the egress proxy asks for sandboxes (default: the host's /etc/resolv.conf)")
	f.StringVar(&cfg.EgressProxy.CAFile, "egress-proxy-ca-file", "", "PEM certificates trusted, besides the host's roots, for destinations whose requests a network rule transforms")
	f.DurationVar(&cfg.Node.WatchdogInterval, "watchdog-interval", 0, "mean interval between health probes of a running sandbox, jittered ±25% (default 32s; negative disables)")
	f.IntVar(&cfg.Node.PoolConcurrency, "pool-concurrency", 0, "warm pool members made at once (default 2)")
	f.DurationVar(&cfg.Node.MetricsRetention, "metrics-retention", 0, "how long per-sandbox metric samples are kept (default 1h)")
	f.DurationVar(&cfg.Node.BackstopGrace, "backstop-grace", 0, "how long after a sandbox's end time the node stops it by itself (ttl_backstop) when the control plane has not (default 2m)")
	f.DurationVar(&cfg.TemplateGCGrace, "template-gc-grace", 0, "how long the template garbage collector keeps a build nothing needs any more before freeing it (default 15m)")
	f.DurationVar(&cfg.TemplateGCInterval, "template-gc-interval", 0, "time between runs of the template garbage collector, which frees the files of deleted and superseded template builds once no sandbox uses them (default 1h; negative disables)")
	f.Int64Var(&cfg.MaxTemplateDiskMB, "max-template-disk-mb", 0, "largest disk size in MiB a template build may ask for with minFreeDiskMb (default 65536)")
	f.IntVar(&cfg.Builds.Slots, "build-slots", 0, "template builds running at once on this machine, over all teams (default 2)")
	f.IntVar(&cfg.Builds.TeamQueue, "build-queue", 0, "template builds of one team waiting for a build slot at most; more are refused with 429 (default 16)")
	f.IntVar(&cfg.Builds.MaxSteps, "build-max-steps", 0, "steps of one template build at most (default 256)")
	f.DurationVar(&cfg.Builds.BuildTimeout, "build-timeout", 0, "longest time one template build runs once it has a slot (default 1h)")
	f.DurationVar(&cfg.BuildStepTimeout, "build-step-timeout", 0, "longest time one RUN step of a template build runs (default 30m)")
}

// prepareHost applies what hostFlags read beyond the configuration: a
// requested rebuild of the base template.
func prepareHost(cfg *noderole.Host, rebuildBase bool) error {
	if !rebuildBase {
		return nil
	}
	if cfg.Driver == "fake" {
		return fmt.Errorf("--rebuild-base: the fake driver has no base template: %w", errdefs.ErrInvalid)
	}
	// A request on the data directory, honoured (and removed) once the
	// new base build is ready.
	return builder.RequestBaseRebuild(cfg.DataDir)
}
