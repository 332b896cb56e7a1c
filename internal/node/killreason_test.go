package node_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// TestKillPathReasons checks docs/lifecycle.md §1 on the node: for every way
// a sandbox ends, the event carries the reason and every log line naming
// the sandbox from the moment it starts ending carries kill_reason.
func TestKillPathReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reason sandbox.KillReason
		typ    nodeapi.EventType
		end    func(t *testing.T, e *env, a *node.Agent)
	}{
		{sandbox.KillRequest, nodeapi.EventKilled, func(t *testing.T, e *env, a *node.Agent) {
			if err := a.Kill(context.Background(), "sb1", sandbox.KillRequest); err != nil {
				t.Fatal(err)
			}
		}},
		{sandbox.KillTimeout, nodeapi.EventKilled, func(t *testing.T, e *env, a *node.Agent) {
			if err := a.Kill(context.Background(), "sb1", sandbox.KillTimeout); err != nil {
				t.Fatal(err)
			}
		}},
		{sandbox.KillOrphaned, nodeapi.EventKilled, func(t *testing.T, e *env, a *node.Agent) {
			if err := a.Kill(context.Background(), "sb1", sandbox.KillOrphaned); err != nil {
				t.Fatal(err)
			}
		}},
		{sandbox.KillTTLBackstop, nodeapi.EventKilled, func(t *testing.T, e *env, a *node.Agent) {
			time.Sleep(time.Hour + 3*time.Minute)
		}},
		{sandbox.KillOOM, nodeapi.EventExited, func(t *testing.T, e *env, a *node.Agent) {
			if err := e.fake.OOMKill("sb1"); err != nil {
				t.Fatal(err)
			}
		}},
		{sandbox.KillExited, nodeapi.EventExited, func(t *testing.T, e *env, a *node.Agent) {
			if err := e.fake.Exit("sb1", 3); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.reason.String(), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, fake.Config{})
				a := e.start()
				events, _ := a.Watch(t.Context())
				e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.EndAt = time.Now().Add(time.Hour) })
				synctest.Wait()
				before := len(e.logs.lines(t))
				tc.end(t, e, a)
				ev, ok := pollEvent(t, events)
				if !ok || ev.Type != tc.typ || ev.Reason != tc.reason || ev.ExecutionID != "exec-sb1" {
					t.Fatalf("event %+v (%t), want %s with reason %s", ev, ok, tc.typ, tc.reason)
				}
				n := 0
				for _, l := range e.logs.lines(t)[before:] {
					if l["sandbox_id"] != "sb1" {
						continue
					}
					n++
					if l["kill_reason"] != tc.reason.String() {
						t.Errorf("log line without kill_reason=%s: %v", tc.reason, l)
					}
				}
				if n == 0 {
					t.Fatal("no log line names the sandbox on its kill path")
				}
			})
		})
	}
}

// TestKillExecution checks that a kill naming an execution never hits a
// resumed successor.
func TestKillExecution(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a := e.start()
		e.create(a, "sb1")
		if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{}); err == nil {
			t.Fatal("second pause accepted")
		}
		if _, err := a.Resume(ctx, "sb1", nodeapi.ResumeRequest{ExecutionID: "exec-2", EndAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{ExecutionID: "exec-sb1"}); !errdefs.IsConflict(err) {
			t.Fatalf("pause naming the old execution: %v, want conflict", err)
		}
		if err := a.KillExecution(ctx, "sb1", "exec-sb1", sandbox.KillTimeout); !errdefs.IsConflict(err) {
			t.Fatalf("kill naming the old execution: %v, want conflict", err)
		}
		if !running(t, a, "sb1") {
			t.Fatal("the resumed execution was stopped by an action for the old one")
		}
		if err := a.KillExecution(ctx, "sb1", "exec-2", sandbox.KillTimeout); err != nil {
			t.Fatalf("kill naming the current execution: %v", err)
		}
		if _, err := a.Get(ctx, "sb1"); !errdefs.IsNotFound(err) {
			t.Fatalf("after kill: %v", err)
		}
	})
}

// TestBackstopExitRace pins docs/lifecycle.md §2's tie rule from both sides:
// an exit that becomes ready while the firing backstop settles (50 ms after
// it) is recorded as the exit, never as ttl_backstop; an exit well after
// the backstop (1 s) is too late, and the backstop's kill stands.
func TestBackstopExitRace(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Minute
	tests := []struct {
		name      string
		exitAfter time.Duration // after end time plus grace
		want      nodeapi.EventType
		reason    sandbox.KillReason
	}{
		{"exit while the backstop settles wins", 50 * time.Millisecond, nodeapi.EventExited, sandbox.KillExited},
		{"exit a second later loses", time.Second, nodeapi.EventKilled, sandbox.KillTTLBackstop},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, fake.Config{})
				e.tune = func(c *node.Config) { c.BackstopGrace = grace }
				start := time.Now()
				e.fake.SetBehavior("sb1", fake.Behavior{ExitAfter: time.Minute + grace + tc.exitAfter, ExitCode: 2})
				a := e.start()
				events, _ := a.Watch(t.Context())
				e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.EndAt = start.Add(time.Minute) })
				time.Sleep(time.Minute + grace + 2*time.Second)
				ev, ok := pollEvent(t, events)
				if !ok || ev.Type != tc.want || ev.Reason != tc.reason {
					t.Fatalf("event %+v (%t), want %s with reason %s", ev, ok, tc.want, tc.reason)
				}
				if ev2, ok := pollEvent(t, events); ok {
					t.Fatalf("second event %+v", ev2)
				}
			})
		})
	}
}
