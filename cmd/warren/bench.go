package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/warren-sandbox/warren/internal/bench"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

func newBench(stdout, stderr io.Writer) *cobra.Command {
	var (
		o                       bench.Options
		quick                   bool
		jsonFile, drivers       string
		runsc, envd, baseRootFS string
		logLevel, commit        string
		iterations, burst       int
		densityMiB, densityMax  int
		poolSize                int
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a Warren server the way a user's program sees it",
		Long: `Measure time to interactive (create → first command result), bursts of
creates, exec and 1 MiB file round trips, pause/resume/fork and idle density,
through the HTTP API and envd behind the edge proxy; then time to interactive
and a burst again with a warm pool (admin API) when the server offers one.
Print a table; --json writes the figures.

With --drivers, bench starts its own 'warren serve' for each driver, one after
the other, each with its own data dir, cgroup root, nftables table, address
range and veth prefix on a loopback port (root needed), and prints ratios.
Otherwise it measures the server at --api-url (env E2B_API_URL) with --api-key
(env E2B_API_KEY); the team's concurrency limit must allow the burst.`,
		Example: `  warren bench --quick --drivers runsc,runc --json bench.json
  E2B_API_URL=http://127.0.0.1:3000 E2B_API_KEY=e2b_... warren bench --quick`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return err
			}
			o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
			o.Plan = bench.FullPlan()
			if quick {
				o.Plan = bench.QuickPlan()
			}
			f := cmd.Flags()
			if f.Changed("iterations") {
				o.Plan.TTIIterations = iterations
			}
			if f.Changed("burst") {
				o.Plan.Burst = burst
			}
			if f.Changed("density-budget-mib") {
				o.Plan.DensityBudgetMiB = densityMiB
			}
			if f.Changed("density-max") {
				o.Plan.DensityMax = densityMax
			}
			if f.Changed("pool-size") {
				o.Plan.PoolSize = poolSize
			}
			if o.AdminToken == "" {
				o.AdminToken = os.Getenv("WARREN_ADMIN_TOKEN")
			}
			if o.APIURL == "" {
				o.APIURL = os.Getenv("E2B_API_URL")
			}
			if o.APIKey == "" {
				o.APIKey = os.Getenv("E2B_API_KEY")
			}
			for _, d := range strings.Split(drivers, ",") {
				if d = strings.TrimSpace(d); d != "" {
					o.Drivers = append(o.Drivers, d)
				}
			}
			if len(o.Drivers) == 0 && (o.APIURL == "" || o.APIKey == "") {
				return fmt.Errorf("bench: give --drivers, or --api-url and --api-key (E2B_API_URL, E2B_API_KEY): %w", errdefs.ErrInvalid)
			}
			for _, fl := range []struct{ name, val string }{{"runsc", runsc}, {"envd", envd}, {"base-rootfs", baseRootFS}} {
				if fl.val != "" {
					o.ServeFlags = append(o.ServeFlags, "--"+fl.name, fl.val)
				}
			}
			rep, runErr := bench.Execute(cmd.Context(), o)
			if rep == nil {
				return runErr
			}
			if commit != "" {
				rep.Commit = commit
			}
			if err := rep.WriteTable(stdout); err != nil {
				return err
			}
			if jsonFile != "" {
				if err := writeReport(jsonFile, rep); err != nil {
					return err
				}
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.APIURL, "api-url", "", "API URL of the server to measure (env E2B_API_URL)")
	f.StringVar(&o.APIKey, "api-key", "", "API key (env E2B_API_KEY)")
	f.StringVar(&o.AdminToken, "admin-token", "", "admin token of the measured server, to set a warm pool for the pooled pass (env WARREN_ADMIN_TOKEN)")
	f.StringVar(&o.Team, "team", "default", "team the warm pool is set for (the API key's team)")
	f.IntVar(&poolSize, "pool-size", 0, "warm pool size of the pooled pass: time to interactive again and a burst of this size (default 20, quick 5; 0 skips)")
	f.StringVar(&o.CgroupRoot, "cgroup-root", "", "the measured server's --cgroup-root, for cgroup memory per sandbox in the density run")
	f.StringVar(&drivers, "drivers", "", "start a warren serve per driver (e.g. runsc,runc), one after the other, and compare them")
	f.BoolVar(&quick, "quick", false, "quick run (about two minutes per driver) instead of the full one")
	f.StringVar(&jsonFile, "json", "", "write the report as JSON to this file")
	f.StringVar(&o.Template, "template", "base", "template the sandboxes start from")
	f.IntVar(&iterations, "iterations", 0, "sequential time-to-interactive iterations (default 100, quick 10)")
	f.IntVar(&burst, "burst", 0, "creates sent at once (default 100, quick 10)")
	f.IntVar(&densityMiB, "density-budget-mib", 0, "stop the density run when host available memory dropped by this many MiB (default 4096, quick 1024)")
	f.IntVar(&densityMax, "density-max", 0, "at most this many idle sandboxes in the density run (default 100, quick 10; 0 skips)")
	f.StringVar(&o.WorkDir, "work-dir", "", "where the started servers' data dirs are made (default the system temp dir)")
	f.StringVar(&runsc, "runsc", "", "serve --runsc for the started servers")
	f.StringVar(&envd, "envd", "", "serve --envd for the started servers")
	f.StringVar(&baseRootFS, "base-rootfs", "", "serve --base-rootfs for the started servers")
	f.StringVar(&commit, "commit", "", "commit recorded in the report (default the binary's VCS revision, absent with -buildvcs=false)")
	f.StringVar(&logLevel, "log-level", "info", "log level of bench's progress on stderr")
	return cmd
}

// writeReport writes the JSON report to path (atomically).
func writeReport(path string, rep *bench.Report) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bench-*.json")
	if err != nil {
		return fmt.Errorf("bench report %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := rep.WriteJSON(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("bench report %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("bench report %s: %w", path, errors.Join(errdefs.ErrUnavailable, err))
	}
	return nil
}
