package cgroup

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/sandbox"
)

// TestV2Files checks the v2 file formats against a fake cgroup directory
// (this development host has no v2 controllers to test them for real).
func TestV2Files(t *testing.T) {
	t.Parallel()
	mount := t.TempDir()
	m := newV2(mount, "warren", testLog(t))
	dir := m.dir("sbx-f")
	files := map[string]string{
		"cpu.max": "max 100000", "memory.max": "max", "memory.swap.max": "max", "pids.max": "max",
		"cpu.stat":       "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
		"memory.current": "4096", "memory.peak": "8192", "pids.current": "3",
		"memory.events": "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	c := &v2Cgroup{m: m, name: "sbx-f"}
	if err := c.Update(ctx, sandbox.Resources{VCPUs: 2, MemoryMB: 256, Pids: 100}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cpu.max": "200000 100000", "memory.max": "268435456", "memory.swap.max": "0", "pids.max": "100"}
	for f, v := range want {
		if got, _ := readString(dir, f); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}
	if err := c.Update(ctx, sandbox.Resources{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := readString(dir, "cpu.max"); got != "max 100000" {
		t.Errorf("unlimited cpu.max = %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte("268435456"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stats{CPUUsageNanos: 1500000, MemoryBytes: 4096, MemoryPeakBytes: 8192, MemoryLimit: 268435456, Pids: 3}); st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
	if oom, err := c.OOMKilled(ctx); err != nil || !oom {
		t.Errorf("OOMKilled = %v, %v", oom, err)
	}
	procs, err := c.Procs(ctx)
	if err != nil || len(procs) != 0 {
		t.Errorf("Procs = %v, %v", procs, err)
	}
}
