// Package serve is `warren serve`: the API role's control plane
// (internal/app/apirole) over an in-process node (internal/app/noderole),
// on one listener, with the store in SQLite by default.
package serve

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/app/apirole"
	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodebuild"
)

// Config is the configuration of `warren serve`.
type Config struct {
	// Settings are the control plane's, as warren api's; without a
	// DatabaseURL the store is SQLite in the data dir.
	apirole.Settings
	// Host are the node agent's, as warren node's.
	noderole.Host
	// DefaultPools is the size of the warm pools of base and of the code
	// interpreter's template when it is offered, set at every start
	// (basepool.go): PoolSizeAuto sizes each from the host, 0 (the zero
	// value; warren serve's default is auto) turns them off.
	DefaultPools int
}

func (c *Config) setDefaults() error {
	if err := c.Host.SetDefaults(); err != nil {
		return err
	}
	return c.Settings.SetDefaults()
}

// Run serves until ctx ends (SIGTERM), then shuts down gracefully:
// in-flight requests finish, the evictor stops, sandboxes keep running and
// are recovered by the next start; warm pool members, which belong to
// this server, are destroyed (the next start refills the pools).
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
	st, err := apirole.OpenStore(ctx, cfg.DataDir, cfg.DatabaseURL, log)
	if err != nil {
		return err
	}
	sys.OnClose("store", func() { st.Close() })
	cp, err := apirole.Open(ctx, sys, cfg.Settings, st)
	if err != nil {
		return err
	}
	n, err := noderole.Open(ctx, sys, cfg.Host)
	if err != nil {
		return err
	}
	snaps, err := serveSnapshots(ctx, n, log)
	if err != nil {
		return err
	}
	be := apirole.Backend{Node: n.Service, Snapshots: snaps, Templates: n.Templates}
	if n.Local != nil {
		be.Builds, be.Catalog = n.Local.Service, n.Local.Catalog
	}
	if pl, ok := n.Service.(nodeapi.Pooler); ok {
		be.Pools = pl
	}
	if n.Volumes != nil {
		be.VolumeNodes = localVolumeNodes{id: LocalNodeID, vm: n.Volumes}
	}
	if err := cp.Build(ctx, be); err != nil {
		return err
	}
	if be.Pools != nil {
		if err := setDefaultPools(ctx, cfg.DefaultPools, be.Pools, n.Templates, cp.API, log); err != nil {
			if cfg.DefaultPools != PoolSizeAuto {
				return err // asked for explicitly
			}
			log.Warn("no default warm pool", "error", err)
		}
	}
	addLocalNode(sys, cp.Nodes, n.Service, log.With("component", "nodereg"))

	var handler http.Handler = cp.API
	if n.Local != nil {
		handler = apirole.WithUploads(cp.API, n.Local.Service.UploadHandler())
	}
	cp.Serve(handler, func() {
		if cp.Key == "" {
			fmt.Fprintf(sys.Out, "# E2B_API_KEY: the default team's key was printed on the first start only; warren keys create --data-dir %s prints a new one\n", cfg.DataDir)
		}
		log.Info("warren serving", "addr", cp.Addr.String(), "driver", cfg.Driver, "domain", cp.Domain,
			"store", storeKind(cfg), "data_dir", cfg.DataDir, "admin_token", cfg.AdminToken != "", "egress_allow", opts.EgressAllow)
	})
	return sys.Run(ctx)
}

func storeKind(cfg Config) string {
	if strings.HasPrefix(cfg.DatabaseURL, "postgres") {
		return "postgres"
	}
	return "sqlite"
}

// serveSnapshots is the sandbox snapshots of `warren serve`'s agent, kept
// in its catalog, which is the API's too (nil without a real driver: the
// fake one has no catalog). The snapshots older versions marked with a
// file are recorded as such first.
func serveSnapshots(ctx context.Context, n *noderole.Node, log *slog.Logger) (nodeapi.SandboxSnapshotter, error) {
	if n.Agent == nil || n.Local == nil {
		return nil, nil
	}
	if c, err := nodebuild.AdoptMarkers(ctx, n.Local.Catalog); err != nil {
		return nil, fmt.Errorf("sandbox snapshots of an earlier version: %w", err)
	} else if c > 0 {
		log.Info("recorded the sandbox snapshots an earlier version marked", "count", c)
	}
	return nodebuild.NewSandboxSnapshots(nodebuild.SandboxSnapshotsConfig{Agent: n.Agent, Catalog: n.Local.Catalog,
		Logger: log.With("component", "snapshots")})
}
