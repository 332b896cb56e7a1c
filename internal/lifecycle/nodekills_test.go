package lifecycle_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// TestNodeKillRecordedAsTheNodeSaid: the node killed a sandbox on its own
// (its backstop fired while the control plane was away: no event reached
// it). Whichever way the control plane finds out (its evictor's timeout
// kill, a reconcile, a user's kill, a pause, the node's report in its
// heartbeat, a late event), the kill is recorded with the node's reason
// and the kill's time: the sandbox's killed time, its one killed event and
// the counter say ttl_backstop at that time, never timeout or node_lost.
func TestNodeKillRecordedAsTheNodeSaid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		find func(t *testing.T, h *harness, sb *store.Sandbox, at time.Time)
	}{
		{"evictor", func(t *testing.T, h *harness, sb *store.Sandbox, at time.Time) {
			time.Sleep(2 * time.Minute) // the end time passes; the evictor kills
		}},
		{"reconcile", func(t *testing.T, h *harness, sb *store.Sandbox, at time.Time) {
			if err := h.m.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"request", func(t *testing.T, h *harness, sb *store.Sandbox, at time.Time) {
			if err := h.m.Kill(ctx, "team", sb.ID, sandbox.KillRequest); err != nil {
				t.Fatal(err)
			}
		}},
		{"pause", func(t *testing.T, h *harness, sb *store.Sandbox, at time.Time) {
			if err := h.m.Pause(ctx, "team", sb.ID, true); !errdefs.IsNotFound(err) {
				t.Fatalf("pause of a sandbox its node killed: %v", err)
			}
		}},
		{"heartbeat", func(t *testing.T, h *harness, sb *store.Sandbox, at time.Time) {
			kills, _ := h.node.OwnKills(ctx)
			if len(kills) != 1 {
				t.Fatalf("own kills %+v", kills)
			}
			if err := h.m.RecordNodeKill(ctx, "local", kills[0]); err != nil {
				t.Fatal(err)
			}
			// Reported again (the ack was lost): recorded once.
			if err := h.m.RecordNodeKill(ctx, "local", kills[0]); err != nil {
				t.Fatal(err)
			}
		}},
		{"late event", func(t *testing.T, h *harness, sb *store.Sandbox, at time.Time) {
			kills, _ := h.node.OwnKills(ctx)
			h.node.Emit(kills[0])
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := start(t, storetest.SQLite(t), fakenode.New(), nil)
				sb := h.create(lifecycle.CreateParams{Timeout: time.Minute})
				// The control plane hears nothing of the kill (the fake tells
				// no watcher), as when it is away at the time.
				time.Sleep(30 * time.Second)
				at := time.Now().UTC()
				h.node.KillOwn(sb.ID, sandbox.KillTTLBackstop, at)
				time.Sleep(10 * time.Second)
				tc.find(t, h, sb, at)
				synctest.Wait()
				h.wantState(sb.ID, sandbox.StateKilled, sandbox.KillTTLBackstop)
				if got := h.get(sb.ID); !got.KilledAt.Equal(at) {
					t.Errorf("killed at %s, the node killed it at %s", got.KilledAt, at)
				}
				evs, err := h.st.QueryEvents(ctx, store.EventFilter{SandboxID: sb.ID, Types: []string{store.EventKilled}})
				if err != nil || len(evs) != 1 {
					t.Fatalf("killed events: %+v %v", evs, err)
				}
				if e := evs[0]; e.Reason != sandbox.KillTTLBackstop || !e.At.Equal(at) || e.ExecutionID != sb.Spec.ExecutionID {
					t.Errorf("killed event %+v, want ttl_backstop at %s", e, at)
				}
				if n := h.killed("ttl_backstop"); n != 1 {
					t.Errorf("sandbox_killed_total{ttl_backstop} = %v, want 1", n)
				}
				for _, r := range []string{"timeout", "node_lost", "request"} {
					if n := h.killed(r); n != 0 {
						t.Errorf("sandbox_killed_total{%s} = %v, want 0", r, n)
					}
				}
			})
		})
	}
}

// TestRecordNodeKillRefusesOthers: a node's report is recorded only for a
// sandbox placed on that node, in the execution it names; anything else is
// dropped (and so acknowledged: the node stops reporting it) without
// touching the sandbox. A reason no node gives is recorded as unknown.
func TestRecordNodeKillRefusesOthers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, storetest.SQLite(t), fakenode.New(), nil)
		sb := h.create(lifecycle.CreateParams{Timeout: time.Hour})
		now := time.Now()
		for _, c := range []struct {
			name, node string
			ev         nodeapi.Event
		}{
			{"another node", "node-b", nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: sb.ID, ExecutionID: sb.Spec.ExecutionID, Reason: sandbox.KillTTLBackstop, At: now}},
			{"no execution", "local", nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: sb.ID, Reason: sandbox.KillTTLBackstop, At: now}},
			{"other execution", "local", nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: sb.ID, ExecutionID: "exec-other", Reason: sandbox.KillOOM, At: now}},
			{"unknown sandbox", "local", nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: "nosuchsandbox", ExecutionID: "x", Reason: sandbox.KillOOM, At: now}},
		} {
			if err := h.m.RecordNodeKill(ctx, c.node, c.ev); err != nil {
				t.Fatalf("%s: %v, want it dropped", c.name, err)
			}
			h.wantState(sb.ID, sandbox.StateRunning, "")
		}
		ev := nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: sb.ID, ExecutionID: sb.Spec.ExecutionID, Reason: "rm -rf /", At: now}
		if err := h.m.RecordNodeKill(ctx, "local", ev); err != nil {
			t.Fatal(err)
		}
		h.wantState(sb.ID, sandbox.StateKilled, "")
	})
}
