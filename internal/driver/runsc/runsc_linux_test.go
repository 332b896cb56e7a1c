package runsc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/drivertest"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

func TestMain(m *testing.M) { drivertest.Main(m) }

// RunscEnv names the runsc binary the tests use.
const RunscEnv = "WARREN_RUNSC"

// newTestDriver returns a driver with its own state dir and the host half
// of the harness, or skips (fails under CI) when a prerequisite is missing.
func newTestDriver(t testing.TB) (*Driver, *drivertest.Host) {
	t.Helper()
	host := drivertest.NewHost(t)
	bin := os.Getenv(RunscEnv)
	_, err := os.Stat(bin)
	drivertest.Require(t, bin != "" && err == nil, "needs a static runsc binary at $"+RunscEnv)
	state := t.TempDir()
	d, err := New(Config{Path: bin, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	host.StateDirs = []string{d.RuntimeRoot(), filepath.Join(state, "sandboxes")}
	return d, host
}

func TestConformance(t *testing.T) {
	d, host := newTestDriver(t)
	drivertest.Run(t, drivertest.Harness{
		Driver:    d,
		NewSpec:   host.NewSpec,
		Leftovers: host.Leftovers,
		HostPids: func(pids int64) int64 {
			return HostPids(sandbox.Resources{Pids: pids}.TasksPerUser())
		},
		Reopen: func(t testing.TB) driver.Driver {
			d2, err := New(d.cfg)
			if err != nil {
				t.Fatal(err)
			}
			return d2
		},
	})
}

// TestWaitSurvivesLostWaiter kills the driver's runsc wait process (as the
// parent-death signal would when the OS thread that started it exits): the
// driver must watch again instead of reporting an exit.
func TestWaitSurvivesLostWaiter(t *testing.T) {
	d, host := newTestDriver(t)
	ctx := t.Context()
	sp := host.NewSpec(t, drivertest.SpecOptions{})
	sp.Init = driver.Process{Args: []string{"/bin/sh", "-c", "while true; do sleep 1; done"}}
	if err := d.Start(ctx, sp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Delete(context.Background(), sp.ID) })

	b, err := d.rt.Lookup(ctx, sp.ID)
	if err != nil {
		t.Fatal(err)
	}
	first := b.Watcher()
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if b.Watcher() != first {
			break
		}
		if b.Watch.Finished() {
			t.Fatal("the sandbox's exit was reported after its waiter was killed")
		}
		if time.Now().After(deadline) {
			t.Fatal("no new waiter after a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, err := d.Status(ctx, sp.ID); err != nil || st.State != driver.StateRunning {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if err := d.Kill(ctx, sp.ID); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	e, err := d.Wait(wctx, sp.ID)
	if err != nil || e.Code != 137 || !e.Signaled {
		t.Errorf("Wait = %+v, %v; want 137", e, err)
	}
}
