package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Options configure Execute.
type Options struct {
	// APIURL and APIKey name an existing server; used when Drivers is
	// empty.
	APIURL, APIKey string
	// AdminToken (and Team, default "default") let the runner set a warm
	// pool on an existing server; the started servers get one of their own.
	AdminToken, Team string
	// CgroupRoot is the existing server's cgroup root for density (may be
	// empty).
	CgroupRoot string
	// Drivers, when set, makes Execute start its own `warren serve` for
	// each driver, one after the other, and compare them.
	Drivers []string
	// Warren is the warren binary to start (default: this executable);
	// ServeFlags are extra serve flags; WorkDir holds the data dirs.
	Warren     string
	ServeFlags []string
	WorkDir    string
	Plan       Plan
	Template   string
	Log        *slog.Logger
}

// Execute runs the plan against each server and returns the report. A
// server that cannot be started or used is recorded in its run's errors
// and the others still run; the error then names the failures.
func Execute(ctx context.Context, o Options) (*Report, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	rep := &Report{Date: time.Now().UTC(), Commit: commit(), Mode: o.Plan.Mode, Host: Host{CPUs: runtime.NumCPU(), LoadAvgStart: loadAvg()}}
	if mt, err := memTotal(); err == nil {
		rep.Host.MemTotalMiB = mt
	}
	var errs []error
	if len(o.Drivers) == 0 {
		if o.APIURL == "" {
			return nil, fmt.Errorf("bench: no --api-url and no --drivers: %w", errdefs.ErrInvalid)
		}
		runs, err := NewRunner(Config{APIURL: o.APIURL, APIKey: o.APIKey, AdminToken: o.AdminToken, Team: o.Team, Template: o.Template,
			Plan: o.Plan, CgroupRoot: o.CgroupRoot, Log: o.Log}).Run(ctx)
		rep.Runs = append(rep.Runs, runs...)
		errs = append(errs, err)
	}
	for i, drv := range o.Drivers {
		if ctx.Err() != nil {
			break
		}
		runs, err := benchDriver(ctx, o, i, drv)
		rep.Runs = append(rep.Runs, runs...)
		if err != nil {
			runs[0].Errors = append(runs[0].Errors, err.Error())
			errs = append(errs, err)
		}
	}
	rep.Host.LoadAvgEnd = loadAvg()
	rep.ComputeRatios()
	return rep, errors.Join(errs...)
}

func benchDriver(ctx context.Context, o Options, i int, drv string) ([]*Run, error) {
	warren := o.Warren
	if warren == "" {
		exe, err := os.Executable()
		if err != nil {
			return []*Run{{Driver: drv}}, fmt.Errorf("bench %s: own executable: %w", drv, err)
		}
		warren = exe
	}
	o.Log.Info("bench: starting server", "driver", drv)
	srv, err := StartServer(ctx, ServerConfig{Warren: warren, Driver: drv, Index: i, WorkDir: o.WorkDir,
		MaxConcurrent: o.Plan.MaxConcurrent() + 5, Extra: o.ServeFlags, Log: o.Log})
	if err != nil {
		return []*Run{{Driver: drv}}, err
	}
	defer srv.Stop()
	return NewRunner(Config{APIURL: srv.URL, APIKey: srv.APIKey, AdminToken: srv.AdminToken, Driver: drv, Template: o.Template,
		Plan: o.Plan, CgroupRoot: srv.CgroupRoot, Log: o.Log}).Run(ctx)
}

// commit returns the VCS revision the binary was built from (short, with
// "-dirty" when the tree had changes), or "".
func commit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}
