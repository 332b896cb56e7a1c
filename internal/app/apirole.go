package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/leader"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/placement"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/throttle"
)

// APIConfig is the configuration of `warren api`: the REST API, the edge
// proxy and the lifecycle over the registered nodes (internal/placement),
// with no node of its own. Several may share one Postgres database; the
// one holding the leader lease runs the singletons (apisingletons.go).
type APIConfig struct {
	// Listen is the address of the one listener (default 127.0.0.1:3000).
	Listen string
	// DatabaseURL is the postgres:// URL of the shared database (required).
	DatabaseURL string
	// APIKey seeds a key of the default team, as for serve; with none and
	// no key yet, one is generated and printed once.
	APIKey string
	// AdminToken enables the admin endpoints (X-Admin-Token); at least
	// MinAdminTokenLen characters.
	AdminToken string
	// TrustedProxies: as for serve.
	TrustedProxies []string
	// NodeCredentialKey is the key every node's own token is made and
	// checked with (internal/nodeauth; `warren node token create`): the
	// same on every replica, at least 32 characters. Required unless
	// InsecureLoopbackNodes.
	NodeCredentialKey string
	// InsecureLoopbackNodes lets nodes register without a token, from
	// loopback only, and be called without credentials (one-host tests).
	InsecureLoopbackNodes bool
	// NodeCA verifies the nodes' certificates on the calls to their RPC
	// and proxy listeners (PEM; default the system's roots). A node is
	// called over TLS, or over plain HTTP on loopback only.
	NodeCA string
	// Domain, PublicURL, TLSCert/TLSKey, Events, EgressAllow, Limits,
	// MetricsListen: as for serve.
	Domain                  string
	PublicURL               string
	TLSCert, TLSKey         string
	Events                  EventsConfig
	EgressAllow             []string
	Limits                  store.Limits
	MetricsListen           string
	MetricsListenBestEffort bool
	// Liveness tunes when silent nodes become unreachable and lost.
	Liveness nodereg.LivenessConfig
	Logger   *slog.Logger
	// Out receives the export lines (default os.Stdout).
	Out io.Writer
	// Ready, when set, is called with the bound address once serving.
	Ready func(addr string)
}

func (c *APIConfig) setDefaults() error {
	if !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		return fmt.Errorf("warren api needs Postgres, shared by its replicas and nodes' registry: set --database-url (or WARREN_DATABASE_URL) to a postgres:// URL: %w", errdefs.ErrInvalid)
	}
	switch {
	case c.NodeCredentialKey == "" && !c.InsecureLoopbackNodes:
		return fmt.Errorf("warren api needs the key its nodes' tokens are made with: set --node-credential-key (or WARREN_NODE_CREDENTIAL_KEY), %d characters or more, the same on every replica: %w",
			nodeauth.MinKeyLen, errdefs.ErrInvalid)
	case c.NodeCredentialKey != "" && c.InsecureLoopbackNodes:
		return fmt.Errorf("--insecure-loopback-nodes is for nodes without tokens: drop it, or the node credential key: %w", errdefs.ErrInvalid)
	case c.NodeCredentialKey != "" && len(c.NodeCredentialKey) < nodeauth.MinKeyLen:
		return fmt.Errorf("node credential key: at least %d characters: %w", nodeauth.MinKeyLen, errdefs.ErrInvalid)
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:3000"
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
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	c.Liveness = c.Liveness.WithDefaults()
	return nil
}

// RunAPI serves the `warren api` role until ctx ends, then shuts down
// gracefully (sandboxes keep running on their nodes).
func RunAPI(ctx context.Context, cfg APIConfig) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	log := cfg.Logger
	eg, err := egress.Parse(cfg.EgressAllow)
	if err != nil {
		return err
	}
	st, err := store.OpenPostgres(ctx, cfg.DatabaseURL, log)
	if err != nil {
		return err
	}
	defer st.Close()
	key, err := ensureKey(ctx, st, Config{APIKey: cfg.APIKey})
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
	hops, err := newAPIHops(st, cfg, log.With("component", "nodeauth"))
	if err != nil {
		return err
	}
	places, err := placement.New(placement.Config{Store: st, Credential: hops.rpc, TLS: hops.tls, Logger: log.With("component", "placement"), Registry: reg})
	if err != nil {
		return err
	}
	disp, err := newDispatcher(cfg.Events, eg, st, log, reg)
	if err != nil {
		return err
	}
	lc, err := lifecycle.New(lifecycle.Config{Store: pokingStore{Store: st, poke: disp.Poke}, Node: places, AllNodes: true, Logger: log.With("component", "lifecycle"),
		SandboxChanges: st.WatchSandboxes,
		Registry:       reg, StartGrace: apiStartGrace, TeamLimits: apiserver.LifecycleLimits(st, cfg.Limits)})
	if err != nil {
		return err
	}
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	stopMetrics, err := serveMetrics(ctx, cfg.MetricsListen, cfg.MetricsListenBestEffort, metricsHandler, log.With("component", "metrics"))
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", cfg.MetricsListen, err)
	}
	defer stopMetrics()
	// The template catalog is the database's, shared by the replicas;
	// builds run on nodes (internal/nodebuild).
	tcat, err := templates.New(templates.Config{Store: st.Templates(), Logger: log.With("component", "templates")})
	if err != nil {
		return err
	}
	if err := tcat.EnsureBaseRecord(ctx); err != nil {
		return err
	}
	builds, err := nodebuild.NewRemote(nodebuild.RemoteConfig{Catalog: tcat, Nodes: st, Credential: hops.rpc, Grant: hops.creds.Grant,
		Authenticate: hops.creds.Authenticate, UploadKey: hops.uploadKey, HTTP: nodeauth.Client(hops.tls), Logger: log.With("component", "nodebuild")})
	if err != nil {
		return err
	}
	defer builds.Close()
	if err := builds.Resume(ctx); err != nil {
		return fmt.Errorf("template builds on nodes: %w", err)
	}
	vols, err := newVolumes(st, places, lc, log)
	if err != nil {
		return err
	}
	trusted, _ := throttle.ParsePrefixes(cfg.TrustedProxies) // checked by setDefaults
	api, err := apiserver.New(apiserver.Config{
		Store: st, Lifecycle: lc, Templates: builds, Builds: builds, Catalog: tcat, Logger: log.With("component", "api"),
		AdminToken: cfg.AdminToken, Domain: cfg.Domain, PublicURL: cfg.PublicURL, DefaultLimits: cfg.Limits,
		Metrics: metricsHandler, Registry: reg, TrustedProxies: trusted, Volumes: vols,
	})
	if err != nil {
		return err
	}
	el, err := leader.New(leader.Config{Leases: st, Logger: log.With("component", "leader"), Registry: reg})
	if err != nil {
		return err
	}
	nodes := nodereg.NewRegistry(st, lc, log.With("component", "nodereg"))
	if err := nodes.RegisterMetrics(reg); err != nil {
		return err
	}
	nodes.AdminRoutes(api.HandleAdmin)
	hops.creds.AdminRoutes(api.HandleAdmin)
	px, err := proxy.New(proxy.Config{Router: lc, Domain: cfg.Domain, NodeHop: hops.proxyHop, NodeTLS: hops.tls, TrustedProxies: trusted, Logger: log.With("component", "proxy")})
	if err != nil {
		return err
	}

	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	lcDone := make(chan error, 1)
	go func() { lcDone <- lc.Run(runCtx) }()
	defer func() { stopRun(); <-lcDone }()
	waitEvents := startEvents(runCtx, cfg.Events, eg, st, disp, api, log)
	defer func() { stopRun(); waitEvents() }()
	waitVolumes := runVolumes(runCtx, vols)
	defer func() { stopRun(); waitVolumes() }()
	electionDone := make(chan struct{})
	go func() { defer close(electionDone); el.Run(runCtx) }()
	defer func() { stopRun(); <-electionDone }()
	onNodeBack, waitSingletons := runSingletons(runCtx, el, nodes, cfg.Liveness, lc, log)
	nodes.SetOnNodeBack(onNodeBack)
	defer func() { stopRun(); waitSingletons() }()

	srv := newHTTPServer(Dispatch(withUploads(withNodeRegistration(api, nodes.Handler(hops.creds), builds.LocateHandler()), builds.UploadHandler()), px), cfg.TLSCert != "", log)
	base := baseURL(addr, cfg.TLSCert != "")
	// The SDK's volume content calls go to E2B_VOLUME_API_URL (default
	// https://api.<E2B_DOMAIN>): this server serves them too.
	fmt.Fprintf(cfg.Out, "export E2B_API_URL=%s\nexport E2B_SANDBOX_URL=%s\nexport E2B_VOLUME_API_URL=%s\n", base, base, base)
	if key != "" {
		fmt.Fprintf(cfg.Out, "export E2B_API_KEY=%s\n", key)
	}
	if cfg.Liveness.UnreachableAfter < 2*nodereg.DefaultHeartbeatInterval {
		log.Warn("--node-unreachable-after is under two heartbeat intervals: nodes will flap between ready and unreachable",
			"unreachable_after", cfg.Liveness.UnreachableAfter.String(), "heartbeat_interval", nodereg.DefaultHeartbeatInterval.String())
	}
	log.Info("warren api serving", "addr", addr.String(), "domain", cfg.Domain, "admin_token", cfg.AdminToken != "",
		"node_tokens", !hops.creds.Insecure(),
		"unreachable_after", cfg.Liveness.UnreachableAfter.String(), "lost_after", cfg.Liveness.LostAfter.String())

	return serveUntil(ctx, srv, ln, cfg.TLSCert, cfg.TLSKey, func() {
		if cfg.Ready != nil {
			cfg.Ready(addr.String())
		}
	}, lcDone, log)
}

// withNodeRegistration serves nodes' heartbeats (nodereg.HeartbeatPath)
// and their questions about builds (nodebuild.LocatePath), both
// authenticated with the node's own token, beside the API.
func withNodeRegistration(api, heartbeats, locate http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == nodereg.HeartbeatPath:
			heartbeats.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, nodebuild.LocatePath):
			locate.ServeHTTP(w, r)
		default:
			api.ServeHTTP(w, r)
		}
	})
}
