package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// idleOf returns a harness whose Manager is not running: the test calls
// Reconcile itself, at the point of another call it chooses. The Manager
// is of every node (the API role's, whose creates insert a starting row
// first) when allNodes is set, of one node (one store write) otherwise.
func idleOf(t *testing.T, allNodes bool) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	st, n := storetest.SQLite(t), fakenode.New()
	m, err := lifecycle.New(lifecycle.Config{Store: st, Node: n, Registry: reg, AllNodes: allNodes})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, reg: reg, st: st, node: n, m: m}
}

// once wraps f so that only its first call runs it (hooks fire on every
// call of the fake, including those f makes).
func once(f func()) func() {
	done := false
	return func() {
		if !done {
			done = true
			f()
		}
	}
}

func (h *harness) reconcile() {
	h.t.Helper()
	if err := h.m.Reconcile(context.Background()); err != nil {
		h.t.Fatalf("reconcile: %v", err)
	}
}

func (h *harness) onNode(id string) bool {
	_, err := h.node.Get(context.Background(), id)
	return err == nil
}

// TestReconcileRaces runs Reconcile, and kills, inside the windows of other
// calls, as happens when warren serve's startup reconcile overlaps the
// first API requests: a sandbox being created or forked must not be taken
// for lost by its node, one created between the two listings not for an
// orphan, and a kill, pause or resume since the listings must be neither
// undone nor counted twice.
func TestReconcileRaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour}
	tests := []struct {
		name string
		run  func(t *testing.T, h *harness)
	}{
		{"reconcile while the node creates", func(t *testing.T, h *harness) {
			h.node.BeforeCreate = func(nodeapi.CreateRequest) { h.reconcile() }
			sb, err := h.m.Create(ctx, p)
			if err != nil {
				t.Fatalf("create with a reconcile in its window: %v", err)
			}
			h.wantState(sb.ID, sandbox.StateRunning, "")
			if !h.onNode(sb.ID) {
				t.Fatal("created sandbox not on the node")
			}
			if _, ok := h.m.Deadline(sb.ID); !ok {
				t.Fatal("created sandbox has no deadline")
			}
		}},
		{"create before the node listing", func(t *testing.T, h *harness) {
			var sb *store.Sandbox
			h.node.BeforeList = once(func() { sb = h.create(p) })
			h.reconcile()
			h.wantState(sb.ID, sandbox.StateRunning, "")
			if !h.onNode(sb.ID) {
				t.Fatal("sandbox created during reconcile was killed on the node")
			}
		}},
		{"create after the node listing", func(t *testing.T, h *harness) {
			var sb *store.Sandbox
			h.node.AfterList = func([]*nodeapi.Sandbox) { sb = h.create(p) }
			h.reconcile()
			h.wantState(sb.ID, sandbox.StateRunning, "")
			if !h.onNode(sb.ID) {
				t.Fatal("sandbox created during reconcile was killed on the node")
			}
			if d, ok := h.m.Deadline(sb.ID); !ok || !d.Equal(sb.EndAt) {
				t.Fatalf("deadline = %v %t, want %v", d, ok, sb.EndAt)
			}
		}},
		{"reconcile while the node forks", func(t *testing.T, h *harness) {
			src := h.create(p)
			h.node.BeforeFork = func(string, nodeapi.ForkRequest) { h.reconcile() }
			res, err := h.m.Fork(ctx, "team", src.ID, 2, time.Hour, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					t.Fatalf("fork with a reconcile in its window: %v", r.Err)
				}
				h.wantState(r.Sandbox.ID, sandbox.StateRunning, "")
				evs, err := h.st.QueryEvents(ctx, store.EventFilter{SandboxID: r.Sandbox.ID, Types: []string{store.EventKilled}})
				if err != nil || len(evs) != 0 {
					t.Fatalf("killed events of a running fork: %v %v", evs, err)
				}
			}
		}},
		{"kill while the node creates", func(t *testing.T, h *harness) {
			var id string
			h.node.BeforeCreate = func(req nodeapi.CreateRequest) {
				id = req.ID
				if err := h.m.Kill(ctx, "team", req.ID, sandbox.KillRequest); err != nil {
					t.Errorf("kill while starting: %v", err)
				}
			}
			if _, err := h.m.Create(ctx, p); !errdefs.IsConflict(err) {
				t.Fatalf("create killed while starting: %v, want a conflict", err)
			}
			h.wantState(id, sandbox.StateKilled, sandbox.KillRequest)
			if h.onNode(id) {
				t.Fatal("sandbox killed while starting still runs on the node")
			}
		}},
		{"kill while the node forks", func(t *testing.T, h *harness) {
			src := h.create(p)
			var id string
			h.node.BeforeFork = func(_ string, req nodeapi.ForkRequest) {
				id = req.IDs[0]
				if err := h.m.Kill(ctx, "team", id, sandbox.KillRequest); err != nil {
					t.Errorf("kill while forking: %v", err)
				}
			}
			res, err := h.m.Fork(ctx, "team", src.ID, 1, time.Hour, 0)
			if err != nil || len(res) != 1 || !errdefs.IsConflict(res[0].Err) {
				t.Fatalf("fork killed while starting: %+v %v, want a conflict", res, err)
			}
			h.wantState(id, sandbox.StateKilled, sandbox.KillRequest)
			if h.onNode(id) {
				t.Fatal("fork killed while starting still runs on the node")
			}
		}},
		{"kill after the node listing", func(t *testing.T, h *harness) {
			sb := h.create(p)
			h.node.AfterList = func([]*nodeapi.Sandbox) {
				if err := h.m.Kill(ctx, "team", sb.ID, sandbox.KillRequest); err != nil {
					t.Fatal(err)
				}
			}
			h.reconcile()
			h.wantState(sb.ID, sandbox.StateKilled, sandbox.KillRequest)
			if n := h.killed(sandbox.KillRequest.String()); n != 1 {
				t.Fatalf("sandbox_killed_total{kill_reason=request} = %v, want 1", n)
			}
		}},
		{"pause before the node listing", func(t *testing.T, h *harness) {
			sb := h.create(p)
			h.node.BeforeList = once(func() {
				if err := h.m.Pause(ctx, "team", sb.ID, true); err != nil {
					t.Fatal(err)
				}
			})
			h.reconcile()
			if got := h.get(sb.ID); got.State != sandbox.StatePaused || got.Epoch != sb.Epoch+1 {
				t.Fatalf("after one pause: %s epoch %d, want paused epoch %d", got.State, got.Epoch, sb.Epoch+1)
			}
		}},
		{"pause after the node listing", func(t *testing.T, h *harness) {
			sb := h.create(p)
			h.node.AfterList = func([]*nodeapi.Sandbox) {
				if err := h.m.Pause(ctx, "team", sb.ID, true); err != nil {
					t.Fatal(err)
				}
			}
			h.reconcile()
			if got := h.get(sb.ID); got.State != sandbox.StatePaused || got.Epoch != sb.Epoch+1 {
				t.Fatalf("after one pause: %s epoch %d, want paused epoch %d", got.State, got.Epoch, sb.Epoch+1)
			}
			if _, ok := h.m.Deadline(sb.ID); ok {
				t.Fatal("paused sandbox re-armed")
			}
		}},
		{"resume after the node listing", func(t *testing.T, h *harness) {
			sb := h.create(p)
			if err := h.m.Pause(ctx, "team", sb.ID, true); err != nil {
				t.Fatal(err)
			}
			var resumed *store.Sandbox
			h.node.AfterList = func([]*nodeapi.Sandbox) {
				var err error
				if resumed, err = h.m.Resume(ctx, "team", sb.ID, time.Hour, nil); err != nil {
					t.Fatal(err)
				}
			}
			h.reconcile()
			got := h.get(sb.ID)
			if got.State != sandbox.StateRunning || got.Epoch != resumed.Epoch || got.Spec.ExecutionID != resumed.Spec.ExecutionID {
				t.Fatalf("after resume: %s epoch %d exec %s, want running epoch %d exec %s",
					got.State, got.Epoch, got.Spec.ExecutionID, resumed.Epoch, resumed.Spec.ExecutionID)
			}
			if d, ok := h.m.Deadline(sb.ID); !ok || !d.Equal(resumed.EndAt) {
				t.Fatalf("deadline = %v %t, want %v", d, ok, resumed.EndAt)
			}
		}},
	}
	// Both create paths: one store write (one node) and a starting row
	// first (every node).
	for _, mode := range []struct {
		name     string
		allNodes bool
	}{{"one node", false}, {"all nodes", true}} {
		for _, tc := range tests {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				h := idleOf(t, mode.allNodes)
				tc.run(t, h)
				for _, r := range []sandbox.KillReason{sandbox.KillNodeLost, sandbox.KillOrphaned} {
					if n := h.killed(r.String()); n != 0 {
						t.Errorf("sandbox_killed_total{kill_reason=%s} = %v, want 0", r, n)
					}
				}
			})
		}
	}
}
