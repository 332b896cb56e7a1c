package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/bench"
)

// prerequisite skips the test with reason, or fails it under CI=true.
func prerequisite(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("prerequisite missing under CI=true: %s", reason)
	}
	t.Skipf("skipping: %s", reason)
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
// --drivers runsc` against a server it starts, then checks the JSON.
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
		"--iterations", "2", "--burst", "2", "--density-max", "2", "--density-budget-mib", "4096",
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
	if rep.Mode != "quick" || len(rep.Runs) != 1 || rep.Runs[0].Driver != "runsc" {
		t.Fatalf("report header: mode %q, %d runs", rep.Mode, len(rep.Runs))
	}
	run := rep.Runs[0]
	metrics := map[string]*bench.Metric{}
	for _, m := range run.Metrics {
		metrics[m.Name] = m
	}
	for _, tc := range []struct {
		name string
		minN int
	}{
		{bench.MetricTTI, 2}, {bench.MetricBurst, 2}, {bench.MetricExec, 1}, {bench.MetricWrite1MiB, 1},
		{bench.MetricRead1MiB, 1}, {bench.MetricPause, 1}, {bench.MetricResume, 1}, {bench.MetricFork10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics[tc.name]
			if m == nil {
				t.Fatalf("no %s in %s", tc.name, data)
			}
			if m.N < tc.minN || m.P50Ms <= 0 || m.P95Ms < m.P50Ms || m.P99Ms < m.P95Ms {
				t.Errorf("%s: %+v, want at least %d samples and ordered percentiles", tc.name, m.Summary, tc.minN)
			}
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
