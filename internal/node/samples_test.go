package node_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

func setStats(t *testing.T, e *env, id string, s cgroup.Stats) {
	t.Helper()
	cg, ok := e.cg.Get(sandbox.HostName(id))
	if !ok {
		t.Fatalf("no cgroup of %s", id)
	}
	cg.SetStats(s)
}

func metrics(t *testing.T, a *node.Agent, id string, start, end time.Time) []nodeapi.Stats {
	t.Helper()
	out, err := a.Metrics(context.Background(), id, start, end)
	if err != nil {
		t.Fatalf("metrics of %s: %v", id, err)
	}
	return out
}

func TestSandboxMetricsSamples(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a := e.start()
		t0 := time.Now()
		e.create(a, "sb1") // 1 vCPU, 256 MiB
		setStats(t, e, "sb1", cgroup.Stats{MemoryBytes: 100 << 20})

		time.Sleep(7500 * time.Millisecond) // one sample, at 5 s
		synctest.Wait()
		got := metrics(t, a, "sb1", time.Time{}, time.Time{})
		if len(got) != 1 {
			t.Fatalf("%d samples after 7.5 s, want 1 (every 5 s)", len(got))
		}
		s := got[0]
		if !s.At.Equal(t0.Add(5*time.Second)) || s.MemoryUsedBytes != 100<<20 || s.MemoryTotal != 256<<20 || s.CPUCount != 1 || s.DiskTotalBytes == 0 {
			t.Errorf("first sample %+v", s)
		}
		setStats(t, e, "sb1", cgroup.Stats{MemoryBytes: 120 << 20, CPUUsageNanos: 2_500_000_000})
		time.Sleep(5 * time.Second) // sample at 10 s: 2.5 s of CPU in 5 s on 1 vCPU
		synctest.Wait()
		got = metrics(t, a, "sb1", t0.Add(8*time.Second), time.Time{})
		if len(got) != 1 || got[0].CPUUsedPct != 50 || got[0].MemoryUsedBytes != 120<<20 {
			t.Fatalf("samples since 8 s = %+v, want one at 50%% CPU, 120 MiB", got)
		}
		if got := metrics(t, a, "sb1", time.Time{}, t0.Add(6*time.Second)); len(got) != 1 {
			t.Errorf("samples until 6 s = %d, want 1", len(got))
		}

		if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := metrics(t, a, "sb1", time.Time{}, time.Time{}); len(got) != 2 {
			t.Errorf("%d samples after a minute paused, want the 2 taken before (none while paused)", len(got))
		}
		if _, err := a.Resume(ctx, "sb1", nodeapi.ResumeRequest{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		got = metrics(t, a, "sb1", time.Time{}, time.Time{})
		if len(got) != 4 {
			t.Fatalf("%d samples after resume, want 4", len(got))
		}

		// An agent restart keeps the samples of the sandbox it adopts.
		a.Close()
		a2 := e.start()
		if got := metrics(t, a2, "sb1", time.Time{}, time.Time{}); len(got) != 4 {
			t.Errorf("%d samples after an agent restart, want 4", len(got))
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := metrics(t, a2, "sb1", time.Time{}, time.Time{}); len(got) != 5 {
			t.Errorf("%d samples 5 s after the restart, want 5", len(got))
		}

		if err := a2.Kill(ctx, "sb1", sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
		if _, err := a2.Metrics(ctx, "sb1", time.Time{}, time.Time{}); !errdefs.IsNotFound(err) {
			t.Errorf("metrics of a killed sandbox: %v, want not found", err)
		}
		if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", sandbox.HostName("sb1"))); !os.IsNotExist(err) {
			t.Errorf("state dir of the killed sandbox: %v, want gone", err)
		}
	})
}

func TestSandboxMetricsRetention(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fake.Config{})
		e.tune = func(c *node.Config) { c.MetricsRetention = time.Minute }
		a := e.start()
		e.create(a, "sb1")
		time.Sleep(10*time.Minute + 2500*time.Millisecond)
		synctest.Wait()
		got := metrics(t, a, "sb1", time.Time{}, time.Time{})
		if len(got) < 12 || len(got) > 13 {
			t.Errorf("%d samples kept with 1 minute retention at 5 s, want 12..13", len(got))
		}
		if oldest := time.Since(got[0].At); oldest > time.Minute {
			t.Errorf("oldest sample is %s old, retention 1 minute", oldest)
		}
	})
}
