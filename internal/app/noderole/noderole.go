// Package noderole is `warren node`: one machine's node agent, serving
// the node RPC (internal/node/noderpc) and a node proxy listener
// (proxy.NodeProxy) for the control plane of `warren api`. Its node
// (Open: the agent over its runtime driver and host objects, the
// template catalog and build service) is also `warren serve`'s
// (internal/app/serve), there in process.
package noderole

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/proxy"
)

// Defaults of `warren node`.
const (
	DefaultRPCListen   = "127.0.0.1:3100"
	DefaultProxyListen = "127.0.0.1:3101"
	// DefaultVCPUOvercommit is how many sandbox vCPUs a node offers per
	// host CPU by default.
	DefaultVCPUOvercommit = 8
)

// Config is the configuration of `warren node`.
type Config struct {
	// Host are the node agent's settings, as warren serve's.
	Host
	// RPCListen is the node RPC's address (default DefaultRPCListen);
	// it also serves GET /metrics (with the token) and GET /healthz.
	RPCListen string
	// ProxyListen is the node proxy's address (default
	// DefaultProxyListen).
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
	// required unless both listeners are on loopback.
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
func (c *Config) setDefaults() error {
	if c.RPCListen == "" {
		c.RPCListen = DefaultRPCListen
	}
	if c.ProxyListen == "" {
		c.ProxyListen = DefaultProxyListen
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
	return c.Host.SetDefaults()
}

// advertised is the host:port others reach the listener ln at.
func (c *Config) advertised(ln net.Listener) (string, error) {
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

// Run runs `warren node` until ctx ends, then stops the listeners and
// the agent (sandboxes keep running and are recovered by the next start;
// warm pool members are destroyed).
func Run(ctx context.Context, opts app.Options, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	sys, err := app.New(opts)
	if err != nil {
		return err
	}
	defer sys.Close()
	log := sys.Logger
	if err := cfg.Lock(sys); err != nil {
		return err
	}
	hops, err := cfg.nodeHops(log)
	if err != nil {
		return err
	}
	rpcLn, err := net.Listen("tcp", cfg.RPCListen)
	if err != nil {
		return fmt.Errorf("rpc listen %s: %w", cfg.RPCListen, err)
	}
	sys.OnClose("rpc listener", func() { rpcLn.Close() })
	proxyLn, err := net.Listen("tcp", cfg.ProxyListen)
	if err != nil {
		return fmt.Errorf("proxy listen %s: %w", cfg.ProxyListen, err)
	}
	sys.OnClose("proxy listener", func() { proxyLn.Close() })
	nodeProxy, err := cfg.advertised(proxyLn)
	if err != nil {
		return err
	}

	// The node counts its kills itself: those it makes while the control
	// plane is away are counted nowhere else until it hears of them.
	cfg.Node.CountKills = true
	n, err := Open(ctx, sys, cfg.Host)
	if err != nil {
		return err
	}

	resolve := func(ctx context.Context, teamID string, t nodeapi.Template) (nodeapi.Template, error) {
		return n.Templates.Resolve(ctx, teamID, t.ID)
	}
	var builds *nodebuild.Node
	if n.Local != nil {
		// Builds of the control plane's catalog run here; the builds this
		// node lacks are pulled from the nodes that hold them.
		var locate nodebuild.Locate
		if cfg.APIURL != "" {
			locate = (&nodebuild.Locator{APIURL: cfg.APIURL, Token: cfg.NodeToken, HTTP: hops.api}).Locate
		}
		var snaps nodebuild.Snapshots // the pulled builds' snapshots on ready restore here
		if n.Agent != nil {
			snaps = n.Agent
		}
		builds, err = nodebuild.NewNode(nodebuild.NodeConfig{Catalog: n.Local.Catalog, Service: n.Local.Service,
			Credential: hops.rpc, PullKey: hops.pull, HTTP: hops.peers, Locate: locate, Logger: log.With("component", "nodebuild"),
			Registry: sys.Registry, Snapshots: snaps})
		if err != nil {
			return err
		}
		resolve = builds.Resolve
	}
	// Sandbox snapshots are kept as builds of the node's catalog, which
	// its peers pull.
	var snaps nodeapi.SandboxSnapshotter
	if builds != nil && n.Agent != nil {
		if snaps, err = nodebuild.NewSandboxSnapshots(nodebuild.SandboxSnapshotsConfig{Agent: n.Agent, Catalog: n.Local.Catalog,
			Node: builds, Logger: log.With("component", "snapshots")}); err != nil {
			return err
		}
	}
	rpcOpts := noderpc.Options{
		Token: hops.rpc, MetricsToken: hops.metrics, Logger: log.With("component", "noderpc"), NodeProxy: nodeProxy,
		ResolveTemplate: resolve, SandboxSnapshots: snaps,
	}
	if n.Volumes != nil {
		rpcOpts.Volumes = n.Volumes
	}
	rpcMux := noderpc.NewMux(n.Service, rpcOpts, sys.Registry)
	rpcMux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	if builds != nil {
		// The BuildService beside the NodeService, behind the same
		// credential (and pull grants for artifacts).
		rpcMux.Handle(builds.Handler())
	}
	np, err := proxy.NewNode(proxy.NodeConfig{Node: n.Service, Token: hops.proxy, Logger: log.With("component", "nodeproxy")})
	if err != nil {
		return err
	}
	srv := app.NewHTTP(sys, "node")
	srv.Serve(app.NewHTTPServer(rpcMux, hops.server, log), rpcLn)
	srv.Serve(app.NewHTTPServer(np, hops.server, log), proxyLn)
	srv.OnServe = func() {
		log.Info("warren node serving", "node_id", cfg.NodeID, "rpc", rpcLn.Addr().String(), "proxy", proxyLn.Addr().String(),
			"node_proxy", nodeProxy, "api_url", cfg.APIURL, "driver", cfg.Driver, "data_dir", cfg.DataDir,
			"node_token", cfg.NodeToken != "", "tls", hops.server != nil)
		fmt.Fprintf(sys.Out, "# warren node %s: rpc %s, proxy %s (advertised as %s)\n", cfg.NodeID, rpcLn.Addr(), proxyLn.Addr(), nodeProxy)
		if cfg.Listening != nil {
			cfg.Listening(rpcLn.Addr().String(), proxyLn.Addr().String())
		}
	}
	sys.Add("node serve", srv)
	// Added after the listeners, the loops below stop before them: a node
	// that is shutting down stops its heartbeats first.
	if every := cmp.Or(cfg.TemplateGCInterval, builder.DefaultGCInterval); builds != nil && every > 0 {
		// The copies the control plane let go go with the template
		// collector, which runs as often.
		sys.Go("template sync", func(ctx context.Context) error { builds.SyncLoop(ctx, every); return nil })
	}
	var held func(context.Context) ([]string, error)
	if n.Local != nil {
		held = n.Local.Catalog.HeldBuilds
	}
	if err := cfg.addHeartbeats(sys, n.Service, held, rpcLn, nodeProxy, hops); err != nil {
		return err
	}
	return sys.Run(ctx)
}

// addHeartbeats adds to sys the node's registration with the API at
// APIURL and its heartbeats (its capacity, allocation, templates and
// pools), sent from Start until Close; without an APIURL it adds none.
// held, when set, names the builds whose files the node holds (reported
// with those its sandboxes use).
func (c *Config) addHeartbeats(sys *app.System, svc nodeapi.Service, held func(context.Context) ([]string, error), rpcLn net.Listener, nodeProxy string, hops *nodeHops) error {
	if c.APIURL == "" {
		return nil
	}
	rpcAddr, err := c.advertised(rpcLn)
	if err != nil {
		return err
	}
	capacity, err := nodereg.HostCapacity()
	if err != nil {
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
	log := sys.Logger
	client := &nodereg.Client{APIURL: c.APIURL, Token: c.NodeToken, HTTPClient: hops.apiWithTimeout(), Logger: log.With("component", "nodereg")}
	sys.Go("heartbeats", func(ctx context.Context) error {
		log.Info("registering with the control plane", "api_url", c.APIURL, "node_id", c.NodeID, "rpc_address", base.RPCAddress,
			"boot_id", base.BootID, "capacity_vcpus", capacity.VCPUs, "capacity_memory_mb", capacity.MemoryMB)
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
				log.Warn("apply the heartbeat's reply", "error", err)
			}
		})
		return nil
	})
	return nil
}
