// Package apirole is `warren api`: the REST API, the edge proxy and the
// lifecycle over the nodes that register with it (internal/placement),
// with no node of its own. Several replicas may share one Postgres
// database; the one holding the leader lease runs the singletons
// (singletons.go).
//
// Its control plane (controlplane.go: the lifecycle, events and
// webhooks, volumes, the API server, the node registry, the edge proxy,
// the listener) is also `warren serve`'s (internal/app/serve), there over
// an in-process node. The package links no node code: depaware.txt lists
// its whole closure and deps_test.go holds it to that list and to the
// control plane's rules.
package apirole

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/leader"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/placement"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
)

// Config is the configuration of `warren api`.
type Config struct {
	// Settings are the control plane's, as warren serve's; DatabaseURL is
	// required here (a postgres:// URL).
	Settings
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
	// Liveness tunes when silent nodes become unreachable and lost.
	Liveness nodereg.LivenessConfig
}

func (c *Config) setDefaults() error {
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
	if err := c.Settings.setDefaults(); err != nil {
		return err
	}
	c.Liveness = c.Liveness.WithDefaults()
	return nil
}

// Run serves the `warren api` role until ctx ends, then shuts down
// gracefully (sandboxes keep running on their nodes).
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
	st, err := store.OpenPostgres(ctx, cfg.DatabaseURL, log)
	if err != nil {
		return err
	}
	sys.OnClose("store", func() { st.Close() })
	cp, err := Open(ctx, sys, cfg.Settings, st)
	if err != nil {
		return err
	}
	hops, err := newAPIHops(st, cfg, log.With("component", "nodeauth"))
	if err != nil {
		return err
	}
	places, err := placement.New(placement.Config{Store: st, Credential: hops.rpc, TLS: hops.tls, Logger: log.With("component", "placement"), Registry: sys.Registry})
	if err != nil {
		return err
	}
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
	sys.OnClose("node builds", builds.Close)
	if err := builds.Resume(ctx); err != nil {
		return fmt.Errorf("template builds on nodes: %w", err)
	}
	if err := cp.Build(ctx, Backend{
		Node: places, AllNodes: true, StartGrace: apiStartGrace, VolumeNodes: places,
		Templates: builds, Builds: builds, Catalog: tcat, NodeHop: hops.proxyHop, NodeTLS: hops.tls,
	}); err != nil {
		return err
	}
	el, err := leader.New(leader.Config{Leases: st, Logger: log.With("component", "leader"), Registry: sys.Registry})
	if err != nil {
		return err
	}
	if err := cp.Nodes.RegisterMetrics(sys.Registry); err != nil {
		return err
	}
	hops.creds.AdminRoutes(cp.API.HandleAdmin)
	sys.Go("leader", func(ctx context.Context) error { el.Run(ctx); return nil })
	cp.Nodes.SetOnNodeBack(addSingletons(sys, el, cp.Nodes, cfg.Liveness, cp.Lifecycle))

	locatePath, locate := builds.LocateHandler()
	h := WithUploads(withNodeRegistration(cp.API, cp.Nodes.Handler(hops.creds), locatePath, locate), builds.UploadHandler())
	cp.Serve(h, func() {
		if cfg.Liveness.UnreachableAfter < 2*nodereg.DefaultHeartbeatInterval {
			log.Warn("--node-unreachable-after is under two heartbeat intervals: nodes will flap between ready and unreachable",
				"unreachable_after", cfg.Liveness.UnreachableAfter.String(), "heartbeat_interval", nodereg.DefaultHeartbeatInterval.String())
		}
		log.Info("warren api serving", "addr", cp.Addr.String(), "domain", cp.Domain, "admin_token", cfg.AdminToken != "",
			"node_tokens", !hops.creds.Insecure(),
			"unreachable_after", cfg.Liveness.UnreachableAfter.String(), "lost_after", cfg.Liveness.LostAfter.String())
	})
	return sys.Run(ctx)
}

// withNodeRegistration serves nodes' heartbeats (nodereg.HeartbeatPath)
// and their calls of the ControlPlaneService (under locatePath: where a
// build is), both authenticated with the node's own token, beside the
// API.
func withNodeRegistration(api, heartbeats http.Handler, locatePath string, locate http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == nodereg.HeartbeatPath:
			heartbeats.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, locatePath):
			locate.ServeHTTP(w, r)
		default:
			api.ServeHTTP(w, r)
		}
	})
}
