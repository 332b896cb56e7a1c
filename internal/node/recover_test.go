package node_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func reclaimedMetric(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sandbox_leaked_objects_reclaimed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func TestRecovery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	ctx := context.Background()
	a1 := e.start()
	endAt := time.Now().Add(time.Hour).Truncate(time.Second)
	run1 := e.create(a1, "run1", func(r *nodeapi.CreateRequest) { r.EndAt = endAt })
	e.create(a1, "run2")
	e.create(a1, "paus1")
	e.create(a1, "paus2")
	e.create(a1, "dead1")
	for range 4 {
		_, _ = e.drv.Exec(ctx, "paus1", driver.Process{Args: []string{"tick"}})
	}
	if _, err := a1.Pause(ctx, "paus1", nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.Pause(ctx, "paus2", nodeapi.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	// The agent goes away (its sandboxes keep running).
	a1.Close()

	// While no agent runs: dead1's init exits, run2's record is left
	// mid-pause, and objects leak.
	_ = e.fake.Exit("dead1", 0)
	rec := filepath.Join(e.dir, "sandboxes", "sbx-run2", "state.json")
	b, _ := os.ReadFile(rec)
	writeFile(t, rec, strings.Replace(string(b), `"state": "running"`, `"state": "pausing"`, 1))
	e.cg.Plant("sbx-leak1")
	e.cg.Plant("sbx-paus1") // a paused sandbox holds no cgroup
	e.net.Plant("leak2")
	e.layers.Plant("leak3", true)
	if err := e.drv.Start(ctx, driver.Spec{ID: "leak4"}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(e.dir, "sandboxes", "sbx-leak5", "bundle", "config.json"), "{}")
	writeFile(t, filepath.Join(e.dir, "sandboxes", "sbx-half1", "state.json"), `{"version":1,"id":"half1","state":"starting"}`)
	writeFile(t, filepath.Join(e.dir, "sandboxes", "sbx-snap1", "state.json"), `{"version":1,"id":"snap1","state":"running","internal":true}`)
	writeFile(t, filepath.Join(e.dir, "sandboxes", "sbx-future1", "state.json"), `{"version":99,"id":"future1","state":"running"}`)
	e.cg.Plant("sbx-future1")
	writeFile(t, filepath.Join(e.dir, "sandboxes", "not-a-sandbox", "keep"), "x")
	writeFile(t, filepath.Join(e.dir, "forks", "sbx-run1-abc", "fake-checkpoint.json"), "{}")

	a2 := e.start()
	events, _ := a2.Watch(t.Context())

	// Adopted: same address, backstop re-armed, exits watched.
	sb, err := a2.Get(ctx, "run1")
	if err != nil || sb.State != sandbox.StateRunning || sb.Address != run1.Address || sb.Epoch != 1 {
		t.Fatalf("run1 after restart: %+v, %v", sb, err)
	}
	if d, _ := a2.BackstopDeadline("run1"); !d.Equal(endAt.Add(2 * time.Minute)) {
		t.Errorf("run1 backstop %v, want end time plus 2m", d)
	}
	if sb, err := a2.Get(ctx, "run2"); err != nil || sb.State != sandbox.StateRunning || sb.Epoch != 2 {
		t.Errorf("run2 (left mid-pause, still running) after restart: %+v, %v", sb, err)
	}
	// dead1 stopped while the agent was away: reported on the first watch.
	if ev := nextEvent(t, events); ev.SandboxID != "dead1" || ev.Type != nodeapi.EventExited || ev.Reason != sandbox.KillExited {
		t.Errorf("event %+v, want dead1 exited", ev)
	}
	e.assertNoHostObjects("dead1")

	for _, id := range []string{"leak1", "leak2", "leak3", "leak4", "paus1"} {
		if id == "paus1" {
			if _, ok := e.cg.Get("sbx-paus1"); ok {
				t.Error("stray cgroup of paused paus1 left")
			}
			continue
		}
		e.assertNoHostObjects(id)
	}
	entries, _ := os.ReadDir(filepath.Join(e.dir, "sandboxes"))
	var dirs []string
	for _, en := range entries {
		dirs = append(dirs, en.Name())
	}
	want := []string{"not-a-sandbox", "sbx-future1", "sbx-paus1", "sbx-paus2", "sbx-run1", "sbx-run2"}
	if !slices.Equal(dirs, want) {
		t.Errorf("state dirs %v, want %v", dirs, want)
	}
	if _, ok := e.cg.Get("sbx-future1"); !ok {
		t.Error("cgroup of a newer agent's sandbox was reclaimed")
	}
	// Live sandboxes' objects are untouched.
	for _, id := range []string{"run1", "run2"} {
		if _, ok := e.cg.Get(sandbox.HostName(id)); !ok {
			t.Errorf("cgroup of live %s reclaimed", id)
		}
		if ly, ok := e.layers.Get(id); !ok || !ly.Mounted {
			t.Errorf("layer of live %s reclaimed", id)
		}
		if st, err := e.drv.Status(ctx, id); err != nil || st.State != driver.StateRunning {
			t.Errorf("container of live %s: %+v, %v", id, st, err)
		}
		if !slices.Contains(e.net.Live(), id) {
			t.Errorf("slot of live %s reclaimed", id)
		}
	}

	wantCounts := map[string]int{"container": 2, "cgroup": 3, "network": 2, "mount": 2, "layer": 2, "state_dir": 4, "fork_image": 1}
	got := a2.Reclaimed()
	for kind, n := range wantCounts {
		if got[kind] != n {
			t.Errorf("reclaimed %s = %d, want %d (all: %v)", kind, got[kind], n, got)
		}
	}
	metric := reclaimedMetric(t, e.reg)
	for kind, n := range wantCounts {
		if metric[kind] != float64(n) {
			t.Errorf("metric kind=%s = %v, want %d", kind, metric[kind], n)
		}
	}

	// Paused sandboxes are kept resumable.
	p1, err := a2.Resume(ctx, "paus1", nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatalf("resume paus1 after restart: %v", err)
	}
	if c, _ := e.fake.Counter("paus1"); c != 4 || p1.State != sandbox.StateRunning {
		t.Errorf("paus1 counter %d state %s, want 4 running", c, p1.State)
	}
	if _, err := a2.Resume(ctx, "paus2", nodeapi.ResumeRequest{}); err != nil {
		t.Fatalf("resume paus2 after restart: %v", err)
	}

	// The adopted sandbox's exit watcher runs again.
	_ = e.fake.Exit("run1", 9)
	if ev := nextEvent(t, events); ev.SandboxID != "run1" || ev.Type != nodeapi.EventExited {
		t.Errorf("event %+v, want run1 exited", ev)
	}
	// A third agent finds nothing to reclaim.
	a2.Close()
	a3 := e.start()
	if got := a3.Reclaimed(); len(got) != 0 {
		t.Errorf("second restart reclaimed %v, want nothing", got)
	}
	list, _ := a3.List(ctx)
	var ids []string
	for _, s := range list {
		ids = append(ids, s.ID)
	}
	if !slices.Equal(ids, []string{"paus1", "paus2", "run2"}) {
		t.Errorf("sandboxes after second restart %v", ids)
	}
}

func TestPeriodicReclaim(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fake.Config{})
		e.tune = func(c *node.Config) { c.ReclaimInterval = time.Minute }
		a := e.start()
		ctx := context.Background()
		e.create(a, "live1")
		e.create(a, "paused1")
		if _, err := a.Pause(ctx, "paused1", nodeapi.PauseRequest{Memory: true}); err != nil {
			t.Fatal(err)
		}
		e.cg.Plant("sbx-leak1")
		e.net.Plant("leak2")
		e.layers.Plant("leak3", true)
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		for _, id := range []string{"leak1", "leak2", "leak3"} {
			e.assertNoHostObjects(id)
		}
		if !running(t, a, "live1") || len(e.net.Live()) != 1 {
			t.Errorf("live sandbox touched by the periodic reclaim: slots %v", e.net.Live())
		}
		if _, err := a.Resume(ctx, "paused1", nodeapi.ResumeRequest{}); err != nil {
			t.Errorf("paused sandbox touched by the periodic reclaim: %v", err)
		}
		if got := a.Reclaimed(); got["cgroup"] != 1 || got["network"] != 1 || got["layer"] != 1 {
			t.Errorf("reclaimed %v", got)
		}
		a.Close()
	})
}
