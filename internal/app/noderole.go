package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/hostlock"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/proxy"
)

// Defaults of `warren node`.
const (
	DefaultNodeRPCListen   = "127.0.0.1:3100"
	DefaultNodeProxyListen = "127.0.0.1:3101"
	// DefaultVCPUOvercommit is how many sandbox vCPUs a node offers per
	// host CPU by default.
	DefaultVCPUOvercommit = 8
)

// NodeConfig is the configuration of `warren node`: one machine's node
// agent, serving the node RPC (internal/node/noderpc) and a node proxy
// listener (proxy.NodeProxy) for the control plane of `warren api`.
type NodeConfig struct {
	// Config holds the host-object settings `warren serve` has too (data
	// dir, driver and binaries, cgroup root, network slots, templates,
	// node tuning, logger); its API settings are not used.
	Config
	// RPCListen is the node RPC's address (default DefaultNodeRPCListen);
	// it also serves GET /metrics (with the token) and GET /healthz.
	RPCListen string
	// ProxyListen is the node proxy's address (default
	// DefaultNodeProxyListen).
	ProxyListen string
	// NodeToken is this node's own token (`warren node token create`,
	// internal/nodeauth): the node presents it to the control plane, and
	// takes on every RPC and proxy request only the credentials derived
	// from it. It may be empty only with InsecureLoopback.
	NodeToken string
	// InsecureLoopback lets the node run without a token, both listeners
	// on loopback (one-host tests): it then asks nothing of its callers.
	InsecureLoopback bool
	// TLSCert and TLSKey are the certificate (with its chain) and key the
	// RPC and proxy listeners serve (re-read when the files change);
	// required unless both listeners are on loopback. They shadow
	// Config's, which are not used.
	TLSCert, TLSKey string
	// NodeCA verifies the certificates of the other nodes this node pulls
	// builds from (PEM; default the system's roots).
	NodeCA string
	// APICA verifies the control plane's certificate when APIURL is
	// https (PEM; default the system's roots).
	APICA string
	// NodeID names the node (default: the host name).
	NodeID string
	// Advertise is the host (name or IP) other machines reach this node
	// at; default: the RPC listener's host, or the host name when that is
	// unspecified. Sandboxes name NodeProxyAddr's proxy listener.
	Advertise string
	// APIURL is the control plane's URL: the node registers there and
	// sends a heartbeat every nodereg.DefaultHeartbeatInterval (package
	// nodereg). Empty: no registration (a control plane that calls the
	// node's RPC without a registry, as tests do).
	APIURL string
	// CapacityVCPUs and CapacityMemoryMB are what the node offers to
	// placement; defaults: DefaultVCPUOvercommit vCPUs per host CPU (a
	// sandbox's vCPUs are a share, not a reservation: most sandboxes idle)
	// and the host's memory.
	CapacityVCPUs    int64
	CapacityMemoryMB int64
	// Listening, when set, is called with the bound addresses once both
	// listeners serve.
	Listening func(rpc, proxy string)
}

// setNodeDefaults fills the defaults and refuses what cannot work.
func (c *NodeConfig) setNodeDefaults() error {
	if c.RPCListen == "" {
		c.RPCListen = DefaultNodeRPCListen
	}
	if c.ProxyListen == "" {
		c.ProxyListen = DefaultNodeProxyListen
	}
	if c.NodeID == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("node id: no --node-id and no host name: %w", err)
		}
		c.NodeID = h
	}
	if err := c.checkIdentity(); err != nil {
		return err
	}
	return c.setDefaults()
}

// advertised is the host:port others reach the listener ln at.
func (c *NodeConfig) advertised(ln net.Listener) (string, error) {
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	host := c.Advertise
	if host == "" {
		h, _, _ := net.SplitHostPort(c.RPCListen)
		if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
			host = h
		} else if host, _ = os.Hostname(); host == "" {
			return "", fmt.Errorf("advertise: no --advertise and no host name: %w", errdefs.ErrInvalid)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// RunNode runs `warren node` until ctx ends, then stops the listeners and
// the agent (sandboxes keep running and are recovered by the next start;
// warm pool members are destroyed).
func RunNode(ctx context.Context, cfg NodeConfig) error {
	if err := cfg.setNodeDefaults(); err != nil {
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
	locks, err := hostlock.Acquire(hostlock.DefaultDir, hostNames(cfg.Config))
	if err != nil {
		return err
	}
	defer locks.Release()
	hops, err := cfg.nodeHops()
	if err != nil {
		return err
	}
	rpcLn, err := net.Listen("tcp", cfg.RPCListen)
	if err != nil {
		return fmt.Errorf("rpc listen %s: %w", cfg.RPCListen, err)
	}
	defer rpcLn.Close()
	proxyLn, err := net.Listen("tcp", cfg.ProxyListen)
	if err != nil {
		return fmt.Errorf("proxy listen %s: %w", cfg.ProxyListen, err)
	}
	defer proxyLn.Close()
	nodeProxy, err := cfg.advertised(proxyLn)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The node counts its kills itself: those it makes while the control
	// plane is away are counted nowhere else until it hears of them.
	cfg.Node.CountKills = true
	parts, err := buildNode(ctx, cfg.Config, eg, reg)
	if err != nil {
		return err
	}
	defer parts.close()

	resolve := func(ctx context.Context, teamID string, t nodeapi.Template) (nodeapi.Template, error) {
		return parts.templates.Resolve(ctx, teamID, t.ID)
	}
	var builds *nodebuild.Node
	if parts.local != nil {
		// Builds of the control plane's catalog run here; the builds this
		// node lacks are pulled from the nodes that hold them.
		var locate func(context.Context, string) (*nodebuild.Source, error)
		if cfg.APIURL != "" {
			locate = (&nodebuild.Locator{APIURL: cfg.APIURL, Token: cfg.NodeToken, HTTP: hops.api}).Locate
		}
		var snaps nodebuild.Snapshots // the pulled builds' snapshots on ready restore here
		if parts.agent != nil {
			snaps = parts.agent
		}
		builds, err = nodebuild.NewNode(nodebuild.NodeConfig{Catalog: parts.local.Catalog, Service: parts.local.Service,
			Credential: hops.rpc, PullKey: hops.pull, HTTP: hops.peers, Locate: locate, Logger: log.With("component", "nodebuild"),
			Registry: reg, Snapshots: snaps})
		if err != nil {
			return err
		}
		resolve = builds.Resolve
	}
	// Sandbox snapshots are kept as builds of the node's catalog, which
	// its peers pull.
	var snaps nodeapi.SandboxSnapshotter
	if builds != nil && parts.agent != nil {
		if snaps, err = nodebuild.NewSandboxSnapshots(nodebuild.SandboxSnapshotsConfig{Agent: parts.agent, Catalog: parts.local.Catalog,
			Node: builds, Logger: log.With("component", "snapshots")}); err != nil {
			return err
		}
	}
	rpcOpts := noderpc.Options{
		Token: hops.rpc, MetricsToken: hops.metrics, Logger: log.With("component", "noderpc"), NodeProxy: nodeProxy,
		ResolveTemplate: resolve, SandboxSnapshots: snaps,
	}
	if parts.volumes != nil {
		rpcOpts.Volumes = parts.volumes
	}
	rpcMux := noderpc.NewMux(parts.node, rpcOpts, reg)
	rpcMux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	if builds != nil {
		rpcMux.Handle(nodebuild.PathPrefix, builds.Handler())
		// The copies the control plane let go go with the template
		// collector, which runs as often.
		if every := cmp.Or(cfg.TemplateGCInterval, builder.DefaultGCInterval); every > 0 {
			syncCtx, stopSync := context.WithCancel(ctx)
			syncDone := make(chan struct{})
			go func() { defer close(syncDone); builds.SyncLoop(syncCtx, every) }()
			defer func() { stopSync(); <-syncDone }()
		}
	}
	np, err := proxy.NewNode(proxy.NodeConfig{Node: parts.node, Token: hops.proxy, Logger: log.With("component", "nodeproxy")})
	if err != nil {
		return err
	}
	servers := []*http.Server{nodeServer(rpcMux, hops.server, log), nodeServer(np, hops.server, log)}
	errc := make(chan error, 2)
	for i, ln := range []net.Listener{rpcLn, proxyLn} {
		go func() {
			if hops.server != nil {
				errc <- servers[i].ServeTLS(ln, "", "")
			} else {
				errc <- servers[i].Serve(ln)
			}
		}()
	}
	log.Info("warren node serving", "node_id", cfg.NodeID, "rpc", rpcLn.Addr().String(), "proxy", proxyLn.Addr().String(),
		"node_proxy", nodeProxy, "api_url", cfg.APIURL, "driver", cfg.Driver, "data_dir", cfg.DataDir,
		"node_token", cfg.NodeToken != "", "tls", hops.server != nil)
	fmt.Fprintf(cfg.Out, "# warren node %s: rpc %s, proxy %s (advertised as %s)\n", cfg.NodeID, rpcLn.Addr(), proxyLn.Addr(), nodeProxy)
	if cfg.Listening != nil {
		cfg.Listening(rpcLn.Addr().String(), proxyLn.Addr().String())
	}
	hbCtx, stopHeartbeats := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	defer func() { stopHeartbeats(); <-hbDone }()
	var held func(context.Context) ([]string, error)
	if parts.local != nil {
		held = parts.local.Catalog.HeldBuilds
	}
	if err := cfg.startHeartbeats(hbCtx, hbDone, parts.node, held, rpcLn, nodeProxy, hops); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return fmt.Errorf("node serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("node shutting down")
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("node shutdown: %w", err)
		}
	}
	return nil
}

func nodeServer(h http.Handler, tlsCfg *tls.Config, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// startHeartbeats registers the node with the API at APIURL and keeps
// sending heartbeats (its capacity, allocation, templates and pools) until
// ctx ends, closing done then; without an APIURL it closes done at once.
// held, when set, names the builds whose files the node holds (reported
// with those its sandboxes use).
func (c *NodeConfig) startHeartbeats(ctx context.Context, done chan<- struct{}, svc nodeapi.Service, held func(context.Context) ([]string, error), rpcLn net.Listener, nodeProxy string, hops *nodeHops) error {
	if c.APIURL == "" {
		close(done)
		return nil
	}
	rpcAddr, err := c.advertised(rpcLn)
	if err != nil {
		close(done)
		return err
	}
	capacity, err := nodereg.HostCapacity()
	if err != nil {
		close(done)
		return fmt.Errorf("node capacity: %w", err)
	}
	capacity.VCPUs *= DefaultVCPUOvercommit
	if c.CapacityVCPUs > 0 {
		capacity.VCPUs = c.CapacityVCPUs
	}
	if c.CapacityMemoryMB > 0 {
		capacity.MemoryMB = c.CapacityMemoryMB
	}
	scheme := "http://"
	if hops.server != nil {
		scheme = "https://"
	}
	base := nodereg.Status{
		ID: c.NodeID, RPCAddress: scheme + rpcAddr, ProxyAddress: nodeProxy,
		BootID: nodereg.NewBootID(), Version: nodereg.BinaryVersion(), Capacity: capacity,
	}
	client := &nodereg.Client{APIURL: c.APIURL, Token: c.NodeToken, HTTPClient: hops.apiWithTimeout(), Logger: c.Logger.With("component", "nodereg")}
	c.Logger.Info("registering with the control plane", "api_url", c.APIURL, "node_id", c.NodeID, "rpc_address", base.RPCAddress,
		"boot_id", base.BootID, "capacity_vcpus", capacity.VCPUs, "capacity_memory_mb", capacity.MemoryMB)
	go func() {
		defer close(done)
		client.Run(ctx, 0, func(ctx context.Context) (nodereg.Status, error) {
			st := base
			if held != nil {
				ids, err := held(ctx)
				if err != nil {
					return nodereg.Status{}, fmt.Errorf("node %q templates held: %w", c.NodeID, err)
				}
				st.Templates = append(slices.Clone(base.Templates), ids...)
			}
			return nodereg.Collect(ctx, svc, st)
		}, func(r *nodereg.Reply) {
			// The kills the API recorded are forgotten; a drain reaches
			// the agent.
			if err := nodereg.Apply(ctx, svc, r); err != nil {
				c.Logger.Warn("apply the heartbeat's reply", "error", err)
			}
		})
	}()
	return nil
}
