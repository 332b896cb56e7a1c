// Package app is the composition root of `warren serve`: it builds the
// store, the node agent with its runtime driver, the lifecycle manager, the
// API server and the edge proxy, and serves them on one listener.
//
// In plain-http mode one listener serves both the REST API and sandbox
// traffic: a request that carries E2b-Sandbox-Id (on a shared host) or
// whose Host is <port>-<sandboxID>.<domain> goes to the proxy, everything
// else to the API.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/hostlock"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/throttle"
	"github.com/warren-sandbox/warren/internal/volumes"
)

// Config is the configuration of `warren serve`.
type Config struct {
	// Listen is the address of the one listener (default 127.0.0.1:3000).
	Listen string
	// DataDir holds the SQLite database, the node's state and templates
	// (default ./var/data).
	DataDir string
	// DatabaseURL, when set to a postgres:// URL, replaces SQLite.
	DatabaseURL string
	// APIKey seeds a key of the default team (e2b_ + 40 hex). When empty
	// and the default team has no key yet, one is generated and kept in
	// DataDir/api-key.
	APIKey string
	// AdminToken enables the admin endpoints (X-Admin-Token); at least
	// MinAdminTokenLen characters.
	AdminToken string
	// TrustedProxies are the reverse proxies (CIDRs or IPs) in front of
	// the listener: for their requests, failed authentications and
	// signed-URL lookups are counted against the client their
	// X-Forwarded-For names (internal/throttle).
	TrustedProxies []string
	// MetricsListen, when set, serves GET /metrics there without a token
	// (for a Prometheus scraper; warren serve's default is
	// DefaultMetricsListen, on loopback). MetricsListenBestEffort turns an
	// address in use into a warning (the default was not asked for).
	MetricsListen           string
	MetricsListenBestEffort bool
	// Driver is runsc (default), runc or fake.
	Driver string
	// Domain is the sandbox domain: <port>-<id>.<Domain> hosts reach a
	// sandbox port. Default: localhost:<listen port>.
	Domain string
	// RunscPath, RuncPath and EnvdPath locate the binaries.
	RunscPath string
	RuncPath  string
	EnvdPath  string
	// CgroupRoot is the cgroup under which sandboxes' cgroups live
	// (default "warren"; template build sandboxes use CgroupRoot-build,
	// and their runtime state lives under DataDir/builder); Net configures the network slot pool (CIDR,
	// nftables table, interface prefix). Two servers on one host need
	// different ones.
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
	// PublicURL, when set, is the absolute URL clients reach the API at
	// (behind a reverse proxy); upload URLs handed to the SDK start with
	// it. Empty: the scheme and Host of each request.
	PublicURL string
	// TLSCert and TLSKey, when both set, serve HTTPS (with HTTP/2).
	TLSCert, TLSKey string
	Logger          *slog.Logger
	// Out receives the export lines (default os.Stdout).
	Out io.Writer
	// Ready, when set, is called with the bound address once serving.
	Ready func(addr string)
	// Events tunes event retention and webhook delivery.
	Events EventsConfig
	// EgressAllow are the operator's exceptions to the egress policy
	// (internal/egress) that guards every outbound connection made for a
	// tenant (image pulls, webhook deliveries): CIDRs, IPs, IP:port or
	// host:port. Empty: only public addresses are reached.
	EgressAllow []string
	// Limits are the server's default team limits (a team's own non-zero
	// limits win); zero fields keep apiserver's defaults.
	Limits store.Limits
	// Node tunes the node agent; zero fields keep its defaults.
	Node NodeTuning
	// DefaultPools is the size of the warm pools of base and of the code
	// interpreter's template when it is offered, set at every start
	// (basepool.go): PoolSizeAuto sizes each from the host, 0 (the zero
	// value; warren serve's default is auto) turns them off.
	DefaultPools int
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
}

// NodeTuning are the node agent's knobs that serve exposes as flags.
type NodeTuning struct {
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
func (t NodeTuning) apply(c *node.Config) {
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

func (c *Config) setDefaults() error {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:3000"
	}
	if c.DataDir == "" {
		c.DataDir = filepath.Join("var", "data")
	}
	if c.Driver == "" {
		c.Driver = "runsc"
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = "warren"
	}
	switch c.Driver {
	case "runsc", "runc", "fake":
	default:
		return fmt.Errorf("driver %q: must be runsc, runc or fake: %w", c.Driver, errdefs.ErrInvalid)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("tls: give both a certificate and a key: %w", errdefs.ErrInvalid)
	}
	if c.APIKey != "" && !apiserver.ValidKey(c.APIKey) {
		return fmt.Errorf("api key: must be e2b_ followed by 40 lowercase hex characters: %w", errdefs.ErrInvalid)
	}
	if err := checkControlPlane(c.AdminToken, c.TrustedProxies); err != nil {
		return err
	}
	if _, err := egress.Parse(c.EgressAllow); err != nil {
		return err
	}
	if err := c.absPaths(); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	return nil
}

// OpenStore opens the store of a data directory (or DatabaseURL).
func OpenStore(ctx context.Context, dataDir, databaseURL string, log *slog.Logger) (*store.SQL, error) {
	dsn := databaseURL
	if dsn == "" {
		dsn = filepath.Join(dataDir, "warren.db")
	}
	return store.Open(ctx, dsn, log)
}

// Run serves until ctx ends (SIGTERM), then shuts down gracefully:
// in-flight requests finish, the evictor stops, sandboxes keep running and
// are recovered by the next start; warm pool members, which belong to
// this server, are destroyed (the next start refills the pools).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	log := cfg.Logger
	eg, err := egress.Parse(cfg.EgressAllow)
	if err != nil {
		return err
	}
	if err := privateDataDir(cfg.DataDir, log); err != nil {
		return err
	}
	locks, err := hostlock.Acquire(hostlock.DefaultDir, hostNames(cfg))
	if err != nil {
		return err
	}
	defer locks.Release()
	st, err := OpenStore(ctx, cfg.DataDir, cfg.DatabaseURL, log)
	if err != nil {
		return err
	}
	defer st.Close()
	key, err := ensureKey(ctx, st, cfg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	defer ln.Close()
	addr := ln.Addr().(*net.TCPAddr)
	if cfg.Domain == "" {
		cfg.Domain = fmt.Sprintf("localhost:%d", addr.Port)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	parts, err := buildNode(ctx, cfg, eg, reg)
	if err != nil {
		return err
	}
	defer parts.close()
	disp, err := newDispatcher(cfg.Events, eg, st, log, reg)
	if err != nil {
		return err
	}
	snaps, err := serveSnapshots(ctx, parts, log)
	if err != nil {
		return err
	}
	lc, err := lifecycle.New(lifecycle.Config{Store: pokingStore{Store: st, poke: disp.Poke}, Node: parts.node, Logger: log.With("component", "lifecycle"), Registry: reg,
		SandboxChanges: st.WatchSandboxes, Snapshots: snaps,
		TeamLimits: apiserver.LifecycleLimits(st, cfg.Limits)})
	if err != nil {
		return err
	}
	var volNodes volumes.Nodes
	if parts.volumes != nil {
		volNodes = localVolumeNodes{id: "local", vm: parts.volumes}
	}
	vols, err := newVolumes(st, volNodes, lc, log)
	if err != nil {
		return err
	}
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	stopMetrics, err := serveMetrics(ctx, cfg.MetricsListen, cfg.MetricsListenBestEffort, metricsHandler, log.With("component", "metrics"))
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", cfg.MetricsListen, err)
	}
	defer stopMetrics()
	trusted, _ := throttle.ParsePrefixes(cfg.TrustedProxies) // checked by setDefaults
	apiCfg := apiserver.Config{
		Store: st, Lifecycle: lc, Templates: parts.templates, Logger: log.With("component", "api"),
		AdminToken: cfg.AdminToken, Domain: cfg.Domain, PublicURL: cfg.PublicURL, DefaultLimits: cfg.Limits,
		Metrics: metricsHandler, Registry: reg, TrustedProxies: trusted, Volumes: vols,
	}
	if parts.local != nil {
		apiCfg.Builds, apiCfg.Catalog = parts.local.Service, parts.local.Catalog
	}
	if pl, ok := parts.node.(nodeapi.Pooler); ok {
		apiCfg.Pools = pl
	}
	api, err := apiserver.New(apiCfg)
	if err != nil {
		return err
	}
	if apiCfg.Pools != nil {
		if err := setDefaultPools(ctx, cfg.DefaultPools, apiCfg.Pools, parts.templates, api, log); err != nil {
			if cfg.DefaultPools != PoolSizeAuto {
				return err // asked for explicitly
			}
			log.Warn("no default warm pool", "error", err)
		}
	}
	nodes := nodereg.NewRegistry(st, lc, log.With("component", "nodereg"))
	nodes.AdminRoutes(api.HandleAdmin)
	var apiHandler http.Handler = api
	if parts.local != nil {
		apiHandler = withUploads(api, parts.local.Service.UploadHandler())
	}
	px, err := proxy.New(proxy.Config{Router: lc, Domain: cfg.Domain, TrustedProxies: trusted, Logger: log.With("component", "proxy")})
	if err != nil {
		return err
	}

	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	lcDone := make(chan error, 1)
	go func() { lcDone <- lc.Run(runCtx) }()
	defer func() { stopRun(); <-lcDone }()
	waitEvents := startEvents(runCtx, cfg.Events, eg, st, disp, api, log)
	defer func() { stopRun(); waitEvents() }()
	waitLocalNode := startLocalNode(runCtx, nodes, parts.node, log.With("component", "nodereg"))
	defer func() { stopRun(); waitLocalNode() }()
	waitVolumes := runVolumes(runCtx, vols)
	defer func() { stopRun(); waitVolumes() }()

	srv := newHTTPServer(Dispatch(apiHandler, px), cfg.TLSCert != "", log)
	base := baseURL(addr, cfg.TLSCert != "")
	// The SDK's volume content calls go to E2B_VOLUME_API_URL (default
	// https://api.<E2B_DOMAIN>): this server serves them too.
	fmt.Fprintf(cfg.Out, "export E2B_API_URL=%s\nexport E2B_SANDBOX_URL=%s\nexport E2B_VOLUME_API_URL=%s\n", base, base, base)
	if key != "" {
		fmt.Fprintf(cfg.Out, "export E2B_API_KEY=%s\n", key)
	} else {
		fmt.Fprintf(cfg.Out, "# E2B_API_KEY: the default team's key was printed on the first start only; warren keys create --data-dir %s prints a new one\n", cfg.DataDir)
	}
	log.Info("warren serving", "addr", addr.String(), "driver", cfg.Driver, "domain", cfg.Domain,
		"store", storeKind(cfg), "data_dir", cfg.DataDir, "admin_token", cfg.AdminToken != "", "egress_allow", cfg.EgressAllow)

	return serveUntil(ctx, srv, ln, cfg.TLSCert, cfg.TLSKey, func() {
		if cfg.Ready != nil {
			cfg.Ready(addr.String())
		}
	}, lcDone, log)
}

// hostNames are the names this server makes host objects under: no other
// instance on the host may use them at the same time (see hostlock).
func hostNames(cfg Config) []hostlock.Name {
	names := []hostlock.Name{{Kind: "data dir", Flag: "--data-dir", Value: cfg.DataDir, Path: true}}
	if cfg.Driver == "fake" {
		return names // no host objects
	}
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	cidr := netslot.DefaultCIDR.String()
	if cfg.Net.CIDR.IsValid() {
		cidr = cfg.Net.CIDR.Masked().String()
	}
	return append(names,
		hostlock.Name{Kind: "cgroup root", Flag: "--cgroup-root", Value: cfg.CgroupRoot},
		hostlock.Name{Kind: "nftables table", Flag: "--nft-table", Value: or(cfg.Net.Table, "warren")},
		hostlock.Name{Kind: "veth prefix", Flag: "--veth-prefix", Value: or(cfg.Net.IfPrefix, "wr")},
		hostlock.Name{Kind: "address range", Flag: "--net-cidr", Value: cidr},
		hostlock.Name{Kind: "netns dir", Flag: "--netns-dir", Value: or(cfg.Net.NetNSDir, filepath.Join("/run/warren", or(cfg.Net.Table, "warren"), "netns"))},
	)
}

func storeKind(cfg Config) string {
	if strings.HasPrefix(cfg.DatabaseURL, "postgres") {
		return "postgres"
	}
	return "sqlite"
}

// Dispatch sends sandbox traffic to the proxy and the rest to the API.
func Dispatch(api http.Handler, px *proxy.Proxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if px.Match(r) {
			px.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// withUploads serves the build service's signed upload URLs (COPY
// contexts the SDK PUTs) beside the API: the token in the URL is their
// authentication, not an API key.
func withUploads(api, uploads http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, builder.UploadPathPrefix) {
			uploads.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// ensureKey makes sure the default team exists and returns the key to
// print: the configured one (the operator passed it), or a key generated
// now because the default team has none. A generated key is printed on
// that first start only and never written anywhere in clear; later
// starts print a hint instead (warren keys create makes another).
func ensureKey(ctx context.Context, st store.Store, cfg Config) (string, error) {
	if _, err := apiserver.EnsureDefaultTeam(ctx, st, cfg.APIKey); err != nil {
		return "", err
	}
	if cfg.APIKey != "" {
		return cfg.APIKey, nil
	}
	keys, err := st.ListAPIKeys(ctx, apiserver.DefaultTeamID)
	if err != nil {
		return "", err
	}
	if len(keys) > 0 {
		return "", nil // keys exist but none is known in clear
	}
	k, _, err := apiserver.AddKey(ctx, st, apiserver.DefaultTeamID, "generated", "")
	if err != nil {
		return "", err
	}
	return k, nil
}

// closer releases what buildNode made.
type closer func()

var _ nodeapi.Service = (*node.Agent)(nil)

// The lifecycle finds the sandbox of the proxy's signed URLs.
var _ proxy.SignatureFinder = (*lifecycle.Manager)(nil)

// MinAdminTokenLen is the shortest admin token accepted: 32 characters
// (a token of `openssl rand -hex 32` has 64). The admin token is the
// operator's credential over every team; a short one could be guessed
// online, which failure throttling only slows.
const MinAdminTokenLen = 32

// checkControlPlane validates the settings warren serve and warren api
// share: the admin token's length (none leaves the admin API off) and the
// trusted proxies.
func checkControlPlane(adminToken string, trustedProxies []string) error {
	if adminToken != "" && len(adminToken) < MinAdminTokenLen {
		return fmt.Errorf("--admin-token (or WARREN_ADMIN_TOKEN): at least %d characters, got %d; make one with `openssl rand -hex 32`: %w",
			MinAdminTokenLen, len(adminToken), errdefs.ErrInvalid)
	}
	if _, err := throttle.ParsePrefixes(trustedProxies); err != nil {
		return fmt.Errorf("--trusted-proxy: %w", err)
	}
	return nil
}
