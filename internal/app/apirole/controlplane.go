package apirole

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/throttle"
	"github.com/warren-sandbox/warren/internal/volumes"
)

// DefaultMetricsListen is where `warren serve` and `warren api` offer
// Prometheus metrics without a token unless told otherwise: loopback
// only, so that only the host (and its scraper) reaches it.
const DefaultMetricsListen = "127.0.0.1:9464"

// MinAdminTokenLen is the shortest admin token accepted: 32 characters
// (a token of `openssl rand -hex 32` has 64). The admin token is the
// operator's credential over every team; a short one could be guessed
// online, which failure throttling only slows.
const MinAdminTokenLen = 32

// Settings are the control plane's settings, warren serve's and warren
// api's alike.
type Settings struct {
	// Listen is the address of the one listener (default 127.0.0.1:3000).
	Listen string
	// DatabaseURL, when set to a postgres:// URL, is the database (warren
	// serve's default is SQLite in its data dir; warren api requires it).
	DatabaseURL string
	// APIKey seeds a key of the default team (e2b_ + 40 hex). When empty
	// and the default team has no key yet, one is generated and printed
	// once.
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
	// (for a Prometheus scraper; the commands' default is
	// DefaultMetricsListen, on loopback). MetricsListenBestEffort turns an
	// address in use into a warning (the default was not asked for).
	MetricsListen           string
	MetricsListenBestEffort bool
	// Domain is the sandbox domain: <port>-<id>.<Domain> hosts reach a
	// sandbox port. Default: localhost:<listen port>.
	Domain string
	// PublicURL, when set, is the absolute URL clients reach the API at
	// (behind a reverse proxy); upload URLs handed to the SDK start with
	// it. Empty: the scheme and Host of each request.
	PublicURL string
	// TLSCert and TLSKey, when both set, serve HTTPS (with HTTP/2).
	TLSCert, TLSKey string
	// Events tunes event retention and webhook delivery.
	Events EventsConfig
	// Limits are the server's default team limits (a team's own non-zero
	// limits win); zero fields keep apiserver's defaults.
	Limits store.Limits
	// SecretsKey seals the teams' secrets at rest (secrets.KeySize
	// bytes); nil: the secrets API is refused.
	SecretsKey []byte
	// Ready, when set, is called with the bound address once serving.
	Ready func(addr string)
}

// setDefaults fills the defaults and refuses what cannot work; relative
// TLS paths are made absolute.
func (s *Settings) setDefaults() error {
	if s.Listen == "" {
		s.Listen = "127.0.0.1:3000"
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		return fmt.Errorf("tls: give both a certificate and a key: %w", errdefs.ErrInvalid)
	}
	if s.APIKey != "" && !apiserver.ValidKey(s.APIKey) {
		return fmt.Errorf("api key: must be e2b_ followed by 40 lowercase hex characters: %w", errdefs.ErrInvalid)
	}
	if s.AdminToken != "" && len(s.AdminToken) < MinAdminTokenLen {
		return fmt.Errorf("--admin-token (or WARREN_ADMIN_TOKEN): at least %d characters, got %d; make one with `openssl rand -hex 32`: %w",
			MinAdminTokenLen, len(s.AdminToken), errdefs.ErrInvalid)
	}
	if _, err := throttle.ParsePrefixes(s.TrustedProxies); err != nil {
		return fmt.Errorf("--trusted-proxy: %w", err)
	}
	for _, p := range []struct {
		name string
		v    *string
	}{{"tls cert", &s.TLSCert}, {"tls key", &s.TLSKey}} {
		if *p.v == "" || filepath.IsAbs(*p.v) {
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

// SetDefaults is setDefaults for the roles that embed Settings in a
// configuration of their own (warren serve).
func (s *Settings) SetDefaults() error { return s.setDefaults() }

// OpenStore opens the store of a data directory (or databaseURL).
func OpenStore(ctx context.Context, dataDir, databaseURL string, log *slog.Logger) (*store.SQL, error) {
	dsn := databaseURL
	if dsn == "" {
		dsn = filepath.Join(dataDir, "warren.db")
	}
	return store.Open(ctx, dsn, log)
}

// Backend is what a control plane runs sandboxes and builds on: the
// registered nodes (warren api) or the in-process node (warren serve).
type Backend struct {
	// Node runs the sandboxes: placement over the nodes, or the agent.
	Node nodeapi.Service
	// AllNodes and StartGrace are the lifecycle's (lifecycle.Config).
	AllNodes   bool
	StartGrace time.Duration
	// Snapshots keeps sandbox snapshots (nil: the lifecycle's default).
	Snapshots nodeapi.SandboxSnapshotter
	// Templates resolves the templates of a create; Builds and Catalog,
	// when both set, serve the template API (apiserver.Config).
	Templates apiserver.TemplateResolver
	Builds    apiserver.BuildService
	Catalog   *templates.Catalog
	// Pools, when set, serves the warm pool admin routes.
	Pools nodeapi.Pooler
	// VolumeNodes hold the volumes (nil: the server has none).
	VolumeNodes volumes.Nodes
	// NodeHop and NodeTLS are how the edge proxy reaches a node's proxy
	// listener (proxy.Config); unset, sandboxes are in process.
	NodeHop func(ctx context.Context, nodeID string) (proxy.NodeHop, error)
	NodeTLS *tls.Config
}

// ControlPlane is the control plane of one process: its typed parts,
// made by Open and Build, run by the System they were added to.
type ControlPlane struct {
	sys      *app.System
	settings Settings

	Store *store.SQL
	// Listener is the one listener, bound by Open; Addr its address and
	// Domain the sandbox domain (Settings.Domain, or localhost:<port>).
	Listener net.Listener
	Addr     *net.TCPAddr
	Domain   string
	// Key is the default team's key to print: the configured one, or one
	// generated now because the team had none ("" otherwise).
	Key string

	Lifecycle *lifecycle.Manager
	Volumes   *volumes.Service
	API       *apiserver.Server
	Nodes     *nodereg.Registry
	Proxy     *proxy.Proxy
}

// Open begins the control plane of s over st on sys: the default team
// (and its key) and the listener. Build makes the rest.
func Open(ctx context.Context, sys *app.System, s Settings, st *store.SQL) (*ControlPlane, error) {
	key, err := ensureKey(ctx, st, s.APIKey)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", s.Listen, err)
	}
	sys.OnClose("listener", func() { ln.Close() })
	addr := ln.Addr().(*net.TCPAddr)
	domain := s.Domain
	if domain == "" {
		domain = fmt.Sprintf("localhost:%d", addr.Port)
	}
	return &ControlPlane{sys: sys, settings: s, Store: st, Listener: ln, Addr: addr, Domain: domain, Key: key}, nil
}

// Build makes the lifecycle over be, event delivery, volumes, the
// metrics listener, the API server, the node registry and the edge
// proxy, and adds their loops to the System.
func (cp *ControlPlane) Build(ctx context.Context, be Backend) error {
	sys, s, st, log := cp.sys, cp.settings, cp.Store, cp.sys.Logger
	disp, err := newDispatcher(s.Events, sys.Egress, st, log, sys.Registry)
	if err != nil {
		return err
	}
	lc, err := lifecycle.New(lifecycle.Config{Store: pokingStore{Store: st, poke: disp.Poke}, Node: be.Node, AllNodes: be.AllNodes,
		Logger: log.With("component", "lifecycle"), Registry: sys.Registry, SandboxChanges: st.WatchSandboxes, Snapshots: be.Snapshots,
		StartGrace: be.StartGrace, TeamLimits: apiserver.LifecycleLimits(st, s.Limits)})
	if err != nil {
		return err
	}
	vols, err := newVolumes(st, be.VolumeNodes, lc, log)
	if err != nil {
		return err
	}
	metricsHandler := promhttp.HandlerFor(sys.Registry, promhttp.HandlerOpts{})
	metrics, err := app.NewMetrics(sys, s.MetricsListen, s.MetricsListenBestEffort, metricsHandler)
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", s.MetricsListen, err)
	}
	if metrics != nil {
		sys.Add("metrics listener", metrics)
	}
	trusted, _ := throttle.ParsePrefixes(s.TrustedProxies) // checked by setDefaults
	sec, err := secretsService(st, s.SecretsKey, log)
	if err != nil {
		return err
	}
	api, err := apiserver.New(apiserver.Config{
		Store: st, Lifecycle: lc, Templates: be.Templates, Builds: be.Builds, Catalog: be.Catalog, Pools: be.Pools,
		Logger: log.With("component", "api"), AdminToken: s.AdminToken, Domain: cp.Domain, PublicURL: s.PublicURL,
		DefaultLimits: s.Limits, Metrics: metricsHandler, Registry: sys.Registry, TrustedProxies: trusted, Secrets: sec, Volumes: vols,
	})
	if err != nil {
		return err
	}
	nodes := nodereg.NewRegistry(st, lc, log.With("component", "nodereg"))
	nodes.AdminRoutes(api.HandleAdmin)
	px, err := proxy.New(proxy.Config{Router: lc, Domain: cp.Domain, NodeHop: be.NodeHop, NodeTLS: be.NodeTLS, TrustedProxies: trusted,
		Logger: log.With("component", "proxy")})
	if err != nil {
		return err
	}
	sys.Go("lifecycle", lc.Run)
	addEvents(sys, s.Events, st, disp, api)
	if vols != nil {
		sys.Go("volumes", func(ctx context.Context) error { vols.Run(ctx, volumeReconcileInterval); return nil })
	}
	cp.Lifecycle, cp.Volumes, cp.API, cp.Nodes, cp.Proxy = lc, vols, api, nodes, px
	return nil
}

// Serve adds the listener's HTTP server to the System: sandbox traffic
// goes to the edge proxy, the rest to h (the API, with what the role
// serves beside it). Once it serves, the export lines are printed, then
// announce runs (the role's log line), then Settings.Ready.
func (cp *ControlPlane) Serve(h http.Handler, announce func()) {
	s, withTLS := cp.settings, cp.settings.TLSCert != ""
	var tlsCfg *tls.Config
	if withTLS {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	}
	srv := app.NewHTTP(cp.sys, "")
	srv.CertFile, srv.KeyFile = s.TLSCert, s.TLSKey
	srv.Serve(app.NewHTTPServer(Dispatch(h, cp.Proxy), tlsCfg, cp.sys.Logger), cp.Listener)
	srv.OnServe = func() {
		base := app.BaseURL(cp.Addr, withTLS)
		// The SDK's volume content calls go to E2B_VOLUME_API_URL (default
		// https://api.<E2B_DOMAIN>): this server serves them too.
		fmt.Fprintf(cp.sys.Out, "export E2B_API_URL=%s\nexport E2B_SANDBOX_URL=%s\nexport E2B_VOLUME_API_URL=%s\n", base, base, base)
		if cp.Key != "" {
			fmt.Fprintf(cp.sys.Out, "export E2B_API_KEY=%s\n", cp.Key)
		}
		announce()
		if s.Ready != nil {
			s.Ready(cp.Addr.String())
		}
	}
	cp.sys.Add("http", srv)
}

// Dispatch sends sandbox traffic to the proxy and the rest to the API.
//
// In plain-http mode one listener serves both the REST API and sandbox
// traffic: a request that carries E2b-Sandbox-Id (on a shared host) or
// whose Host is <port>-<sandboxID>.<domain> goes to the proxy, everything
// else to the API.
func Dispatch(api http.Handler, px *proxy.Proxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if px.Match(r) {
			px.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// WithUploads serves the build service's signed upload URLs (COPY
// contexts the SDK PUTs) beside the API: the token in the URL is their
// authentication, not an API key.
func WithUploads(api, uploads http.Handler) http.Handler {
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
func ensureKey(ctx context.Context, st store.Store, apiKey string) (string, error) {
	if _, err := apiserver.EnsureDefaultTeam(ctx, st, apiKey); err != nil {
		return "", err
	}
	if apiKey != "" {
		return apiKey, nil
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

// The lifecycle finds the sandbox of the proxy's signed URLs.
var _ proxy.SignatureFinder = (*lifecycle.Manager)(nil)
