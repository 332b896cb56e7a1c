package node_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// guestMem returns the sample count and sum of
// sandbox_guest_mem_used_bytes{template}.
func guestMem(t *testing.T, reg *prometheus.Registry, template string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sandbox_guest_mem_used_bytes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "template" && l.GetValue() == template {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

// gauge returns the value of metric name{label=value}.
func gauge(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					if m.GetGauge() != nil {
						return m.GetGauge().GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}

func health(t *testing.T, a *node.Agent, id string) nodeapi.Health {
	t.Helper()
	sb, err := a.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return sb.Health
}

func countAddr(probes []string, addr string) int {
	n := 0
	for _, p := range probes {
		if p == addr {
			n++
		}
	}
	return n
}

func TestWatchdogProbesRunningSandboxes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fake.Config{})
		e.envd.SetProbe(func(context.Context, string) (node.EnvdHealth, error) {
			return node.EnvdHealth{MemUsedBytes: 100 << 20, MemKnown: true}, nil
		})
		a := e.start()
		sb := e.create(a, "sb1")
		if h := health(t, a, "sb1"); h != nodeapi.HealthUnknown {
			t.Fatalf("health before any probe = %q, want unknown", h)
		}
		time.Sleep(24 * time.Second)
		synctest.Wait()
		if n := len(e.envd.Probes()); n != 0 {
			t.Fatalf("%d probes within 24 s, want none (interval 25-40 s)", n)
		}
		time.Sleep(18 * time.Second)
		synctest.Wait()
		if n := countAddr(e.envd.Probes(), sb.Address); n != 1 {
			t.Fatalf("%d probes of %s by 42 s, want 1", n, sb.Address)
		}
		if h := health(t, a, "sb1"); h != nodeapi.HealthHealthy {
			t.Errorf("health = %q, want healthy", h)
		}
		if n, sum := guestMem(t, e.reg, "tmpl"); n != 1 || sum != 100<<20 {
			t.Errorf("guest memory samples = %d (sum %v), want 1 of 100 MiB", n, sum)
		}
		if v := gauge(t, e.reg, "node_sandbox_health", "health", "healthy"); v != 1 {
			t.Errorf("node_sandbox_health{health=healthy} = %v, want 1", v)
		}
		// Jittered, about every 25-40 s: 10 minutes make 15 to 24 probes.
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if n := countAddr(e.envd.Probes(), sb.Address); n < 15 || n > 25 {
			t.Errorf("%d probes in 10m42s, want 15..25", n)
		}
	})
}

func TestWatchdogStaleEpoch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// during runs while the probe is in flight.
		during func(t *testing.T, a *node.Agent)
		// tracked: the sandbox is still on the node afterwards.
		tracked bool
	}{
		{"pause during the probe", func(t *testing.T, a *node.Agent) {
			if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{}); err != nil {
				t.Fatalf("pause: %v", err)
			}
		}, true},
		{"pause and resume during the probe", func(t *testing.T, a *node.Agent) {
			if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{}); err != nil {
				t.Fatalf("pause: %v", err)
			}
			if _, err := a.Resume(ctx, "sb1", nodeapi.ResumeRequest{}); err != nil {
				t.Fatalf("resume: %v", err)
			}
		}, true},
		{"kill during the probe", func(t *testing.T, a *node.Agent) {
			if err := a.Kill(ctx, "sb1", "request"); err != nil {
				t.Fatalf("kill: %v", err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, fake.Config{})
				release := make(chan struct{})
				var once sync.Once
				first := true
				var mu sync.Mutex
				e.envd.SetProbe(func(ctx context.Context, addr string) (node.EnvdHealth, error) {
					mu.Lock()
					block := first
					first = false
					mu.Unlock()
					if block {
						<-release
						// The old epoch's envd answers unhealthy, with memory.
						return node.EnvdHealth{MemUsedBytes: 1 << 30, MemKnown: true}, errors.New("old envd")
					}
					return node.EnvdHealth{}, nil
				})
				a := e.start()
				e.create(a, "sb1")
				time.Sleep(41 * time.Second)
				synctest.Wait()
				if n := len(e.envd.Probes()); n != 1 {
					t.Fatalf("%d probes in flight, want 1", n)
				}
				tc.during(t, a)
				once.Do(func() { close(release) })
				synctest.Wait()
				if n, _ := guestMem(t, e.reg, "tmpl"); n != 0 {
					t.Errorf("guest memory samples = %d, want 0 from a dropped probe", n)
				}
				if v := gauge(t, e.reg, "sandbox_watchdog_probes_total", "result", "stale"); v != 1 {
					t.Errorf("stale probes = %v, want 1", v)
				}
				if v := gauge(t, e.reg, "sandbox_watchdog_probes_total", "result", "unhealthy"); v != 0 {
					t.Errorf("unhealthy probes = %v, want 0", v)
				}
				if tc.tracked {
					if h := health(t, a, "sb1"); h != nodeapi.HealthUnknown {
						t.Errorf("health = %q, want unknown (the stale result is dropped)", h)
					}
				} else if _, err := a.Get(ctx, "sb1"); err == nil {
					t.Error("killed sandbox still tracked")
				}
			})
		})
	}
}

func TestWatchdogNeverProbesPaused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fake.Config{})
		a := e.start()
		run := e.create(a, "sb1")
		paused := e.create(a, "sb2")
		// Let the watchdog schedule sb2 before it pauses.
		time.Sleep(10 * time.Second)
		if _, err := a.Pause(context.Background(), "sb2", nodeapi.PauseRequest{}); err != nil {
			t.Fatalf("pause: %v", err)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		probes := e.envd.Probes()
		if n := countAddr(probes, paused.Address); n != 0 {
			t.Errorf("paused sandbox probed %d times", n)
		}
		if n := countAddr(probes, run.Address); n < 14 {
			t.Errorf("running sandbox probed %d times in 10 minutes, want at least 14", n)
		}
		if h := health(t, a, "sb2"); h != nodeapi.HealthUnknown {
			t.Errorf("paused sandbox health = %q, want unknown", h)
		}
	})
}

func TestWatchdogMemoryReadings(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fake.Config{})
		var mu sync.Mutex
		var answer node.EnvdHealth
		var answerErr error
		set := func(h node.EnvdHealth, err error) {
			mu.Lock()
			defer mu.Unlock()
			answer, answerErr = h, err
		}
		e.envd.SetProbe(func(context.Context, string) (node.EnvdHealth, error) {
			mu.Lock()
			defer mu.Unlock()
			return answer, answerErr
		})
		a := e.start()
		e.create(a, "sb1") // 256 MiB limit
		// probeOnce advances to the next probe and returns the health.
		probeOnce := func() nodeapi.Health {
			t.Helper()
			before := len(e.envd.Probes())
			for range 41 {
				time.Sleep(time.Second)
				synctest.Wait()
				if len(e.envd.Probes()) > before {
					return health(t, a, "sb1")
				}
			}
			t.Fatal("no probe within 41 s")
			return ""
		}
		steps := []struct {
			name        string
			answer      node.EnvdHealth
			err         error
			wantHealth  nodeapi.Health
			wantSamples uint64
			wantSum     float64
		}{
			{"missing reading records nothing", node.EnvdHealth{}, nil, nodeapi.HealthHealthy, 0, 0},
			{"reading far above the limit keeps it healthy", node.EnvdHealth{MemUsedBytes: 1 << 40, MemKnown: true}, nil, nodeapi.HealthHealthy, 1, 1 << 40},
			{"failed probe is unhealthy and records nothing", node.EnvdHealth{MemUsedBytes: 1 << 20, MemKnown: true}, errors.New("down"), nodeapi.HealthUnhealthy, 1, 1 << 40},
			{"missing reading is not replayed", node.EnvdHealth{}, nil, nodeapi.HealthHealthy, 1, 1 << 40},
			{"zero reading is healthy", node.EnvdHealth{MemUsedBytes: 0, MemKnown: true}, nil, nodeapi.HealthHealthy, 2, 1 << 40},
		}
		for _, st := range steps {
			set(st.answer, st.err)
			if h := probeOnce(); h != st.wantHealth {
				t.Errorf("%s: health %q, want %q", st.name, h, st.wantHealth)
			}
			if n, sum := guestMem(t, e.reg, "tmpl"); n != st.wantSamples || sum != st.wantSum {
				t.Errorf("%s: samples %d sum %v, want %d sum %v", st.name, n, sum, st.wantSamples, st.wantSum)
			}
		}
	})
}

func TestHTTPEnvdProbe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		status  int
		header  string
		wantErr bool
		want    node.EnvdHealth
	}{
		{"healthy with reading", http.StatusNoContent, "123456", false, node.EnvdHealth{MemUsedBytes: 123456, MemKnown: true}},
		{"healthy without reading", http.StatusNoContent, "", false, node.EnvdHealth{}},
		{"healthy with a bad reading", http.StatusNoContent, "-5", false, node.EnvdHealth{}},
		{"unhealthy", http.StatusServiceUnavailable, "123", true, node.EnvdHealth{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/health" {
					http.NotFound(w, r)
					return
				}
				if tc.header != "" {
					w.Header().Set(node.MemUsedHeader, tc.header)
				}
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			h, err := node.NewHTTPEnvd(nil).Probe(t.Context(), strings.TrimPrefix(srv.URL, "http://"))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if h != tc.want {
				t.Errorf("health = %+v, want %+v", h, tc.want)
			}
		})
	}
}
