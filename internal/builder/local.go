package builder

import (
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/templates"
)

// LocalConfig is the one-machine set-up of templates and builds under a
// data directory, shared by `warren serve` and `warren template`.
type LocalConfig struct {
	// DataDir is warren's data directory; the catalog lives in
	// DataDir/templates, the build engine's cache in DataDir/builder.
	DataDir string
	// BaseRootFSTar is a pre-built base root filesystem (optional).
	BaseRootFSTar string
	// Runner runs build steps: a driverrun.Runner over the node's runtime
	// driver, as `warren serve` and `warren node` pass (gVisor sandboxes
	// with network slots; over the runc driver, for a single trusted
	// operator only: runc shares the host's kernel). Without one no build
	// step runs (errdefs.ErrUnsupported).
	Runner Runner
	// Network gives build steps outbound network access (default true
	// through NoNetwork=false).
	NoNetwork bool
	// InsecureRegistries are registry hosts reached over plain HTTP.
	InsecureRegistries []string
	// Transport carries registry traffic (Config.Transport).
	Transport http.RoundTripper
	// Snapshotter takes snapshots on ready (the node agent); optional.
	Snapshotter Snapshotter
	// Limits bound what a build may unpack and log (DefaultLimits).
	Limits Limits
	// MaxTemplateDiskMB bounds a template's disk size (ServiceConfig).
	MaxTemplateDiskMB int64
	// Builds bound the builds (ServiceConfig.Builds); StepTimeout one RUN
	// step (Config.StepTimeout).
	Builds      BuildLimits
	StepTimeout time.Duration
	Logger      *slog.Logger
}

// RequestBaseRebuild asks the next Catalog.EnsureBase over dataDir (the
// data directory of LocalConfig) for a new base build, as RebuildBase
// does: `warren serve --rebuild-base`.
func RequestBaseRebuild(dataDir string) error {
	return templates.RequestBaseRebuild(filepath.Join(dataDir, "templates"))
}

// Local is a catalog, a builder and a build service over one data
// directory.
type Local struct {
	Catalog *templates.Catalog
	Builder *Builder
	Service *Service
}

// OpenLocal opens the catalog and build engine under cfg.DataDir. The
// caller owns Service (Close it); `warren serve` also calls
// Service.Recover and Catalog.EnsureBase at start.
func OpenLocal(cfg LocalConfig) (*Local, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("templates: no data directory: %w", errdefs.ErrInvalid)
	}
	if cfg.Runner == nil {
		cfg.Runner = noRunner{}
	}
	log := cfg.Logger
	cat, err := templates.New(templates.Config{
		DataDir: filepath.Join(cfg.DataDir, "templates"), BaseRootFSTar: cfg.BaseRootFSTar, Logger: log,
		UnpackRootFS: layer.UnpackRootFS,
	})
	if err != nil {
		return nil, err
	}
	b, err := New(Config{
		DataDir: filepath.Join(cfg.DataDir, "builder"), Catalog: cat, Runner: cfg.Runner,
		Logger: log, Network: !cfg.NoNetwork, InsecureRegistries: cfg.InsecureRegistries, Snapshotter: cfg.Snapshotter,
		Limits:    cfg.Limits,
		Transport: cfg.Transport, StepTimeout: cfg.StepTimeout,
	})
	if err != nil {
		return nil, err
	}
	svc, err := NewService(ServiceConfig{Builder: b, Logger: log, MaxTemplateDiskMB: cfg.MaxTemplateDiskMB, Builds: cfg.Builds})
	if err != nil {
		b.Close()
		return nil, err
	}
	return &Local{Catalog: cat, Builder: b, Service: svc}, nil
}
