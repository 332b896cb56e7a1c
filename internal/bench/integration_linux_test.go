package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/bench"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// prerequisite skips the test with reason, or fails it under CI=true.
func prerequisite(t *testing.T, reason string) {
	t.Helper()
	testenv.Require(t, false, reason)
}

// pathFrom returns $env, else the repository path rel if it exists.
func pathFrom(t *testing.T, env, rel string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	p, err := filepath.Abs(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		prerequisite(t, "no $"+env+" and no "+rel+" (make build base-rootfs)")
	}
	return p
}

// TestBenchRunsc builds warren and runs a tiny `warren bench --quick
// --drivers runsc` (with a warm pool pass) against a server it starts,
// then checks the JSON and that no host object is left.
func TestBenchRunsc(t *testing.T) {
	if os.Geteuid() != 0 {
		prerequisite(t, "needs root (runsc, cgroups, network namespaces)")
	}
	runsc := pathFrom(t, "WARREN_RUNSC", "bin/runsc")
	envd := pathFrom(t, "WARREN_ENVD", "bin/envd")
	rootfs := pathFrom(t, "WARREN_TEST_ROOTFS_TAR", "var/base-rootfs.tar")
	dir := t.TempDir()
	warren := filepath.Join(dir, "warren")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", warren, "../../cmd/warren")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	report := filepath.Join(dir, "bench.json")
	cmd := exec.CommandContext(ctx, warren, "bench", "--quick", "--drivers", "runsc",
		"--iterations", "2", "--burst", "3", "--density-max", "2", "--density-budget-mib", "4096", "--pool-size", "2",
		"--runsc", runsc, "--envd", envd, "--base-rootfs", rootfs, "--work-dir", dir, "--json", report)
	out, err := cmd.CombinedOutput()
	t.Logf("warren bench:\n%s", out)
	if err != nil {
		t.Fatalf("warren bench: %v", err)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, data)
	}
	if rep.Mode != "quick" || len(rep.Runs) != 2 || rep.Runs[0].Driver != "runsc" || rep.Runs[1].Pool != 2 {
		t.Fatalf("report header: mode %q, %d runs, want runsc without and with a pool of 2", rep.Mode, len(rep.Runs))
	}
	for _, m := range rep.Runs[1].Metrics {
		attempts := 2
		if m.Name == bench.MetricBurstOverPool {
			attempts = 3
		}
		checkFigures(t, m, attempts)
	}
	if len(rep.Runs[1].Metrics) != 4 {
		t.Errorf("with a warm pool: %d metrics, want create, tti, burst and burst_over_pool", len(rep.Runs[1].Metrics))
	}
	// A burst larger than the pool degrades to cold creates, never to
	// errors.
	var over *bench.Metric
	for _, m := range rep.Runs[1].Metrics {
		if m.Name == bench.MetricBurstOverPool {
			over = m
		}
	}
	if m := over; m == nil || m.Failures != 0 || !strings.Contains(m.Note, "from the pool") {
		t.Errorf("burst of 3 against a pool of 2: %+v, want no failure and the pool's share", m)
	}
	// The pooled pass waits for a full pool before its first create and
	// before each burst: at least 1 + 2 + 2 hits. The pass without a pool
	// asks none (the started server has --pool-size 0).
	if c := rep.Runs[1].PoolClaims; c == nil || c.Hits < 5 {
		t.Errorf("pool claims with a pool: %+v, want at least 5 hits", c)
	}
	if c := rep.Runs[0].PoolClaims; c == nil || c.Hits != 0 {
		t.Errorf("pool claims without a pool: %+v, want none", c)
	}
	run := rep.Runs[0]
	metrics := map[string]*bench.Metric{}
	for _, m := range run.Metrics {
		metrics[m.Name] = m
	}
	// Every attempt is counted (a sample or a failure); single failures
	// are figures, not test failures, but each metric has figures.
	for _, tc := range []struct {
		name     string
		attempts int
	}{
		{bench.MetricCreate, 2}, {bench.MetricTTI, 2}, {bench.MetricBurst, 3}, {bench.MetricExec, 30}, {bench.MetricWrite1MiB, 5},
		{bench.MetricRead1MiB, 5}, {bench.MetricPause, 2}, {bench.MetricResume, 2}, {bench.MetricFork10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics[tc.name]
			if m == nil {
				t.Fatalf("no %s in %s", tc.name, data)
			}
			checkFigures(t, m, tc.attempts)
		})
	}
	if d := run.Density; d == nil || d.Started != 2 {
		t.Errorf("density: %+v, want 2 idle sandboxes", run.Density)
	}
	// The server's data dir, cgroup root and nftables table are removed
	// when bench ends.
	if left, _ := filepath.Glob(filepath.Join(dir, "warren-bench-*")); len(left) != 0 {
		t.Errorf("data dirs left behind: %v", left)
	}
	pid := cmd.Process.Pid
	if left, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/warren-bench-%d-*", pid)); len(left) != 0 {
		t.Errorf("cgroups left behind: %v", left)
	}
	if out, err := exec.Command("nft", "list", "table", "inet", fmt.Sprintf("warren_bench_%d_0", pid)).CombinedOutput(); err == nil {
		t.Errorf("nftables table left behind:\n%s", out)
	}
}

// checkFigures checks that m accounts for every attempt and has ordered
// percentiles.
func checkFigures(t *testing.T, m *bench.Metric, attempts int) {
	t.Helper()
	s := m.Summary
	if s.N < 1 || s.N+s.Failures != attempts || s.P50Ms <= 0 || s.P95Ms < s.P50Ms || s.P99Ms < s.P95Ms {
		t.Errorf("%s: %+v, want %d attempts, at least one sample, ordered percentiles", m.Name, s, attempts)
	}
}
