package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/route"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

type harness struct {
	t    *testing.T
	reg  *prometheus.Registry
	st   store.Store
	node *fakenode.Node
	m    *lifecycle.Manager
	stop context.CancelFunc
	done chan error
	logs *logBuf // set by tests that capture the log
}

// start builds a Manager over st and n and runs it until the test ends or
// h.stop is called.
func start(t *testing.T, st store.Store, n *fakenode.Node, tune func(*lifecycle.Config)) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := lifecycle.Config{Store: st, Node: n, Registry: reg}
	if tune != nil {
		tune(&cfg)
	}
	m, err := lifecycle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, reg: reg, st: st, node: n, m: m, stop: cancel, done: make(chan error, 1)}
	go func() { h.done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-h.done })
	synctest.Wait()
	return h
}

func (h *harness) create(p lifecycle.CreateParams) *store.Sandbox {
	h.t.Helper()
	if p.TeamID == "" {
		p.TeamID = "team"
	}
	if p.Template.ID == "" {
		p.Template.ID = "base"
	}
	sb, err := h.m.Create(context.Background(), p)
	if err != nil {
		h.t.Fatal(err)
	}
	return sb
}

func (h *harness) get(id string) *store.Sandbox {
	h.t.Helper()
	sb, err := h.st.GetSandbox(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return sb
}

// killed returns sandbox_killed_total for reason.
func (h *harness) killed(reason string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sandbox_killed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kill_reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func (h *harness) wantState(id string, state sandbox.State, reason sandbox.KillReason) {
	h.t.Helper()
	sb := h.get(id)
	if sb.State != state || sb.KillReason != reason {
		h.t.Fatalf("sandbox %s: state %s reason %q, want %s %q", id, sb.State, sb.KillReason, state, reason)
	}
}

func TestEvictor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, h *harness)
	}{
		{"kills at the end time, not before", func(t *testing.T, h *harness) {
			sb := h.create(lifecycle.CreateParams{Timeout: 10 * time.Second})
			time.Sleep(10*time.Second - time.Millisecond)
			synctest.Wait()
			h.wantState(sb.ID, sandbox.StateRunning, "")
			time.Sleep(2 * time.Millisecond)
			synctest.Wait()
			h.wantState(sb.ID, sandbox.StateKilled, sandbox.KillTimeout)
			if !slices.Contains(h.node.Calls(), "kill "+sb.ID+" timeout") {
				t.Fatalf("node calls %v lack the timeout kill", h.node.Calls())
			}
			evs, _ := h.st.ListEvents(ctx, sb.ID)
			if last := evs[len(evs)-1]; last.Type != store.EventKilled || last.Reason != sandbox.KillTimeout {
				t.Fatalf("last event %+v", last)
			}
			if n := h.killed("timeout"); n != 1 {
				t.Fatalf("sandbox_killed_total{kill_reason=timeout} = %v, want 1", n)
			}
		}},
		{"set timeout can shorten", func(t *testing.T, h *harness) {
			sb := h.create(lifecycle.CreateParams{Timeout: 300 * time.Second})
			if err := h.m.SetTimeout(ctx, "team", sb.ID, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if ns, _ := h.node.Get(ctx, sb.ID); time.Until(ns.EndAt) > 5*time.Second {
				t.Fatalf("node end time not re-armed: %v", ns.EndAt)
			}
			time.Sleep(6 * time.Second)
			synctest.Wait()
			h.wantState(sb.ID, sandbox.StateKilled, sandbox.KillTimeout)
		}},
		{"extend never shortens", func(t *testing.T, h *harness) {
			sb := h.create(lifecycle.CreateParams{Timeout: 60 * time.Second})
			if err := h.m.Extend(ctx, "team", sb.ID, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			time.Sleep(30 * time.Second)
			synctest.Wait()
			h.wantState(sb.ID, sandbox.StateRunning, "")
			if err := h.m.Extend(ctx, "team", sb.ID, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			time.Sleep(45 * time.Second)
			synctest.Wait()
			h.wantState(sb.ID, sandbox.StateRunning, "")
			time.Sleep(20 * time.Second)
			synctest.Wait()
			h.wantState(sb.ID, sandbox.StateKilled, sandbox.KillTimeout)
		}},
		{"auto-pause at the end time", func(t *testing.T, h *harness) {
			sb := h.create(lifecycle.CreateParams{Timeout: 10 * time.Second, AutoPause: true, AutoPauseMemory: true})
			time.Sleep(11 * time.Second)
			synctest.Wait()
			h.wantState(sb.ID, sandbox.StatePaused, "")
			got := h.get(sb.ID)
			if !got.Spec.PausedWithMemory || got.Epoch != 2 {
				t.Fatalf("paused: memory %t epoch %d", got.Spec.PausedWithMemory, got.Epoch)
			}
			// A paused sandbox is not evicted again.
			time.Sleep(time.Hour)
			synctest.Wait()
			h.wantState(sb.ID, sandbox.StatePaused, "")
		}},
		{"node exit is recorded with its reason", func(t *testing.T, h *harness) {
			sb := h.create(lifecycle.CreateParams{Timeout: time.Hour})
			h.node.Exit(sb.ID, sandbox.KillOOM)
			synctest.Wait()
			h.wantState(sb.ID, sandbox.StateKilled, sandbox.KillOOM)
			if n := h.killed("oom"); n != 1 {
				t.Fatalf("sandbox_killed_total{kill_reason=oom} = %v, want 1", n)
			}
			if _, ok := h.m.Deadline(sb.ID); ok {
				t.Fatal("deadline still armed after exit")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tc.run(t, start(t, storetest.SQLite(t), fakenode.New(), nil))
			})
		})
	}
}

// TestRefusedPauseRetriesThenDegrades checks docs/lifecycle.md §3: a refused
// auto-pause leaves the sandbox running, is retried every PauseRetry, and
// after PauseOverstay becomes a filesystem-only pause.
func TestRefusedPauseRetriesThenDegrades(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		n := fakenode.New()
		var calls atomic.Int32
		n.PauseErr = func(string) error {
			if calls.Add(1) <= 3 {
				return errdefs.ErrExhausted
			}
			return nil
		}
		h := start(t, storetest.SQLite(t), n, func(c *lifecycle.Config) {
			c.PauseRetry, c.PauseOverstay = 10*time.Second, 30*time.Second
		})
		sb := h.create(lifecycle.CreateParams{Timeout: 10 * time.Second, AutoPause: true, AutoPauseMemory: true})
		time.Sleep(10 * time.Second)
		synctest.Wait()
		h.wantState(sb.ID, sandbox.StateRunning, "")
		if calls.Load() != 1 {
			t.Fatalf("pause calls = %d, want 1", calls.Load())
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if calls.Load() != 2 {
			t.Fatalf("pause calls after one retry interval = %d, want 2", calls.Load())
		}
		h.wantState(sb.ID, sandbox.StateRunning, "")
		time.Sleep(20 * time.Second)
		synctest.Wait()
		h.wantState(sb.ID, sandbox.StatePaused, "")
		pauses := slices.DeleteFunc(n.Calls(), func(c string) bool { return c[:5] != "pause" })
		if want := "pause " + sb.ID + " memory=false"; pauses[len(pauses)-1] != want || pauses[0] != "pause "+sb.ID+" memory=true" {
			t.Fatalf("pauses = %v, want memory=true first and %q last", pauses, want)
		}
	})
}

func TestConnectAndRoute(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, storetest.SQLite(t), fakenode.New(), nil)
		sb := h.create(lifecycle.CreateParams{Timeout: time.Minute, AutoResume: true})
		got, resumed, err := h.m.Connect(ctx, "team", sb.ID, 10*time.Second)
		if err != nil || resumed || !got.EndAt.Equal(sb.EndAt) {
			t.Fatalf("connect running: resumed %t end %v (was %v) err %v", resumed, got.EndAt, sb.EndAt, err)
		}
		if err := h.m.Pause(ctx, "team", sb.ID, true); err != nil {
			t.Fatal(err)
		}
		if err := h.m.Pause(ctx, "team", sb.ID, true); !errdefs.IsConflict(err) {
			t.Fatalf("second pause: %v, want conflict", err)
		}
		got, resumed, err = h.m.Connect(ctx, "team", sb.ID, 2*time.Minute)
		if err != nil || !resumed || got.State != sandbox.StateRunning || got.Epoch != 3 {
			t.Fatalf("connect paused: %+v resumed %t err %v", got, resumed, err)
		}
		if _, _, err := h.m.Connect(ctx, "other-team", sb.ID, time.Minute); !errdefs.IsNotFound(err) {
			t.Fatalf("other team: %v", err)
		}
		// Traffic wakes a paused sandbox that allows it.
		if err := h.m.Pause(ctx, "team", sb.ID, true); err != nil {
			t.Fatal(err)
		}
		r, err := h.m.Route(ctx, sb.ID, nil)
		if err != nil || r.Address != "127.0.0.1:49983" {
			t.Fatalf("route: %+v %v", r, err)
		}
		h.wantState(sb.ID, sandbox.StateRunning, "")
		// ... but not one that does not.
		sb2 := h.create(lifecycle.CreateParams{Timeout: time.Minute})
		if err := h.m.Pause(ctx, "team", sb2.ID, true); err != nil {
			t.Fatal(err)
		}
		if _, err := h.m.Route(ctx, sb2.ID, nil); !errors.Is(err, route.ErrPaused) {
			t.Fatalf("route paused without auto-resume: %v", err)
		}
		if err := h.m.Kill(ctx, "team", sb2.ID, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
		if err := h.m.Kill(ctx, "team", sb2.ID, sandbox.KillRequest); !errdefs.IsNotFound(err) {
			t.Fatalf("second kill: %v", err)
		}
		if _, err := h.m.Route(ctx, sb2.ID, nil); !errdefs.IsNotFound(err) {
			t.Fatalf("route killed: %v", err)
		}
	})
}

func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	for _, allNodes := range []bool{false, true} {
		t.Run(fmt.Sprintf("all nodes %t", allNodes), func(t *testing.T) {
			t.Parallel()
			testConcurrencyLimit(t, allNodes)
		})
	}
}

func testConcurrencyLimit(t *testing.T, allNodes bool) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, storetest.SQLite(t), fakenode.New(), func(c *lifecycle.Config) { c.AllNodes = allNodes })
		p := lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Minute, MaxConcurrent: 2}
		a := h.create(p)
		h.create(p)
		_, err := h.m.Create(ctx, p)
		var le *lifecycle.LimitError
		if !errors.As(err, &le) || !errdefs.IsExhausted(err) || le.Limit != 2 {
			t.Fatalf("third create: %v", err)
		}
		if err := h.m.Kill(ctx, "team", a.ID, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
		h.create(p)
		h.node.CreateErr = errors.New("boom")
		if _, err := h.m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Timeout: time.Minute}); err == nil {
			t.Fatal("create with a failing node succeeded")
		}
		if n, _ := h.st.CountSandboxes(ctx, "team", store.LiveStates...); n != 2 {
			t.Fatalf("live sandboxes after a failed create = %d, want 2", n)
		}
	})
}

// TestCreateEndFromReady: the TTL counts from when the sandbox is ready
// (the start below takes a second), in the store and on the node, and a
// node that arms its backstop from ready + Timeout is sent no SetEndTime
// after the create; one that keeps the request's EndAt is (docs/lifecycle.md §2).
func TestCreateEndFromReady(t *testing.T) {
	t.Parallel()
	for _, ignore := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			n := fakenode.New()
			n.IgnoreTimeout = ignore
			n.BeforeCreate = func(nodeapi.CreateRequest) { time.Sleep(time.Second) }
			h := start(t, storetest.SQLite(t), n, nil)
			t0 := time.Now()
			sb := h.create(lifecycle.CreateParams{Timeout: time.Minute})
			want := t0.Add(time.Second + time.Minute)
			if !sb.EndAt.Equal(want) || !h.get(sb.ID).EndAt.Equal(want) {
				t.Errorf("node ignores Timeout %t: stored end %v, want %v (ready + timeout)", ignore, h.get(sb.ID).EndAt, want)
			}
			ns, err := n.Get(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !ns.EndAt.Equal(want) {
				t.Errorf("node ignores Timeout %t: node's end %v, want %v", ignore, ns.EndAt, want)
			}
			set := slices.Contains(n.Calls(), "setendtime "+sb.ID)
			if set != ignore {
				t.Errorf("node ignores Timeout %t: SetEndTime sent %t, want %t (calls %v)", ignore, set, ignore, n.Calls())
			}
		})
	}
}

// TestRestart runs a second Manager on the same store and node, as a
// restarted warren serve does: deadlines still fire, lost sandboxes are
// marked, orphans are killed.
func TestRestart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, n := storetest.SQLite(t), fakenode.New()
		h1 := start(t, st, n, nil)
		keep := h1.create(lifecycle.CreateParams{Timeout: time.Minute})
		lost := h1.create(lifecycle.CreateParams{Timeout: time.Minute})
		paused := h1.create(lifecycle.CreateParams{Timeout: time.Minute})
		if err := h1.m.Pause(ctx, "team", paused.ID, true); err != nil {
			t.Fatal(err)
		}
		h1.stop()
		<-h1.done
		h1.done <- nil // let the cleanup's receive return
		n.Kill(ctx, lost.ID, sandbox.KillRequest)
		n.Put(&nodeapi.Sandbox{ID: "orphan", State: sandbox.StateRunning})

		time.Sleep(30 * time.Second)
		h2 := start(t, st, n, nil)
		h2.wantState(lost.ID, sandbox.StateKilled, sandbox.KillNodeLost)
		h2.wantState(keep.ID, sandbox.StateRunning, "")
		if !slices.Contains(n.Calls(), "kill orphan orphaned") {
			t.Fatalf("orphan not killed: %v", n.Calls())
		}
		if d, ok := h2.m.Deadline(keep.ID); !ok || !d.Equal(keep.EndAt) {
			t.Fatalf("deadline after restart = %v %t, want %v", d, ok, keep.EndAt)
		}
		time.Sleep(31 * time.Second)
		synctest.Wait()
		h2.wantState(keep.ID, sandbox.StateKilled, sandbox.KillTimeout)
		h2.wantState(paused.ID, sandbox.StatePaused, "")
	})
}

// TestForkCopiesOwnTokens: each copy of a fork gets an envd access token
// and a traffic access token of its own (none where the source has none),
// and the node is asked to start each copy with the copy's envd token:
// one copy's tokens must open neither its source nor its siblings.
func TestForkCopiesOwnTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		secure, traffic bool
	}{{"secure with traffic token", true, true}, {"secure", true, false}, {"open", false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				h := start(t, storetest.SQLite(t), fakenode.New(), nil)
				src := h.create(lifecycle.CreateParams{Timeout: time.Hour, Secure: tc.secure, TrafficToken: tc.traffic})
				var asked nodeapi.ForkRequest
				h.node.BeforeFork = func(_ string, req nodeapi.ForkRequest) { asked = req }
				res, err := h.m.Fork(ctx, "team", src.ID, 3, time.Hour, 0)
				if err != nil || len(res) != 3 {
					t.Fatalf("fork: %+v %v", res, err)
				}
				if len(asked.EnvdAccessTokens) != len(asked.IDs) {
					t.Fatalf("node asked for %d copies with %d envd tokens", len(asked.IDs), len(asked.EnvdAccessTokens))
				}
				seen := map[string]string{}
				for _, tok := range []string{src.Spec.EnvdAccessToken, src.Spec.TrafficAccessToken} {
					if tok != "" {
						seen[tok] = src.ID
					}
				}
				for i, r := range res {
					if r.Err != nil {
						t.Fatalf("copy %d: %v", i, r.Err)
					}
					c := h.get(r.Sandbox.ID)
					if (c.Spec.EnvdAccessToken != "") != tc.secure || (c.Spec.TrafficAccessToken != "") != tc.traffic {
						t.Errorf("copy %s: envd token %q traffic token %q, want set: %t %t", c.ID, c.Spec.EnvdAccessToken, c.Spec.TrafficAccessToken, tc.secure, tc.traffic)
					}
					if k := slices.Index(asked.IDs, c.ID); k < 0 || asked.EnvdAccessTokens[k] != c.Spec.EnvdAccessToken {
						t.Errorf("copy %s: the node was asked for envd token %q, the store holds %q", c.ID, asked.EnvdAccessTokens, c.Spec.EnvdAccessToken)
					}
					for _, tok := range []string{c.Spec.EnvdAccessToken, c.Spec.TrafficAccessToken} {
						if tok == "" {
							continue
						}
						if other, dup := seen[tok]; dup {
							t.Errorf("copies %s and %s share a token", other, c.ID)
						}
						seen[tok] = c.ID
					}
				}
			})
		})
	}
}
