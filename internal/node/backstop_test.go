package node_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// The grace the tests configure; the default (2 minutes) is tested apart.
const grace = 2 * time.Minute

func pollEvent(t *testing.T, ch <-chan nodeapi.Event) (nodeapi.Event, bool) {
	t.Helper()
	synctest.Wait()
	select {
	case ev := <-ch:
		return ev, true
	default:
		return nodeapi.Event{}, false
	}
}

func running(t *testing.T, a *node.Agent, id string) bool {
	t.Helper()
	sb, err := a.Get(context.Background(), id)
	return err == nil && sb.State == sandbox.StateRunning
}

func TestBackstop(t *testing.T) {
	t.Parallel()

	t.Run("fires at end time plus grace", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, fake.Config{})
			e.tune = func(c *node.Config) { c.BackstopGrace = grace }
			a := e.start()
			events, _ := a.Watch(t.Context())
			start := time.Now()
			e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.EndAt = start.Add(time.Minute) })

			time.Sleep(time.Minute + grace - time.Second)
			if ev, ok := pollEvent(t, events); ok || !running(t, a, "sb1") {
				t.Fatalf("backstop fired before end time plus grace (at %s): %+v", time.Since(start), ev)
			}
			time.Sleep(2 * time.Second)
			ev, ok := pollEvent(t, events)
			if !ok {
				t.Fatalf("backstop did not fire by end time plus grace plus 1s")
			}
			if ev.Type != nodeapi.EventKilled || ev.Reason != sandbox.KillTTLBackstop || ev.SandboxID != "sb1" || ev.ExecutionID != "exec-sb1" {
				t.Errorf("event %+v, want killed by ttl_backstop", ev)
			}
			if running(t, a, "sb1") {
				t.Error("sandbox still running after the backstop")
			}
			e.assertNoHostObjects("sb1")
			var seen bool
			for _, l := range e.logs.lines(t) {
				if strings.Contains(l["msg"].(string), "TTL backstop") {
					seen = true
					if l["level"] != "INFO" || l["kill_reason"] != "ttl_backstop" {
						t.Errorf("backstop log line %v: want level INFO, kill_reason ttl_backstop", l)
					}
				}
			}
			if !seen {
				t.Error("no backstop log line")
			}
		})
	})

	t.Run("default grace is two minutes", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, fake.Config{})
			a := e.start()
			start := time.Now()
			e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.EndAt = start.Add(time.Minute) })
			if d, _ := a.BackstopDeadline("sb1"); !d.Equal(start.Add(3 * time.Minute)) {
				t.Errorf("deadline %s after start, want 3m", d.Sub(start))
			}
		})
	})

	t.Run("no end time, no backstop", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, fake.Config{})
			a := e.start()
			e.create(a, "sb1")
			time.Sleep(24 * time.Hour)
			synctest.Wait()
			if !running(t, a, "sb1") {
				t.Error("sandbox without an end time was stopped")
			}
		})
	})

	t.Run("exit wins over a simultaneous timer", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, fake.Config{})
			e.tune = func(c *node.Config) { c.BackstopGrace = grace }
			// init exits exactly when the backstop is due.
			e.fake.SetBehavior("sb1", fake.Behavior{ExitAfter: time.Minute + grace, ExitCode: 2})
			a := e.start()
			events, _ := a.Watch(t.Context())
			start := time.Now()
			e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.EndAt = start.Add(time.Minute) })
			time.Sleep(time.Minute + grace + time.Second)
			ev, ok := pollEvent(t, events)
			if !ok {
				t.Fatal("no event")
			}
			if ev.Type != nodeapi.EventExited || ev.Reason != sandbox.KillExited {
				t.Errorf("event %+v, want the exit (exited), not the backstop", ev)
			}
			if ev2, ok := pollEvent(t, events); ok {
				t.Errorf("second event %+v", ev2)
			}
		})
	})

	t.Run("re-armed by SetEndTime", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, fake.Config{})
			e.tune = func(c *node.Config) { c.BackstopGrace = grace }
			a := e.start()
			events, _ := a.Watch(t.Context())
			start := time.Now()
			e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.EndAt = start.Add(time.Minute) })
			time.Sleep(30 * time.Second)
			if err := a.SetEndTime(context.Background(), "sb1", start.Add(10*time.Minute)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Minute + grace) // past the old deadline
			if _, ok := pollEvent(t, events); ok || !running(t, a, "sb1") {
				t.Fatal("backstop fired at the old deadline after the end time moved")
			}
			time.Sleep(time.Until(start.Add(10*time.Minute + grace - time.Second)))
			if _, ok := pollEvent(t, events); ok {
				t.Fatal("backstop fired before the new end time plus grace")
			}
			time.Sleep(2 * time.Second)
			if ev, ok := pollEvent(t, events); !ok || ev.Reason != sandbox.KillTTLBackstop {
				t.Fatalf("backstop at new end time plus grace: %+v, %v", ev, ok)
			}

			// Moving the end time earlier re-arms too.
			e.create(a, "sb2", func(r *nodeapi.CreateRequest) { r.EndAt = time.Now().Add(time.Hour) })
			now := time.Now()
			if err := a.SetEndTime(context.Background(), "sb2", now); err != nil {
				t.Fatal(err)
			}
			time.Sleep(grace + time.Second)
			if ev, ok := pollEvent(t, events); !ok || ev.SandboxID != "sb2" || ev.Reason != sandbox.KillTTLBackstop {
				t.Fatalf("backstop after an earlier end time: %+v, %v", ev, ok)
			}
		})
	})

	t.Run("refused pause pushes the backstop", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, fake.Config{})
			e.tune = func(c *node.Config) {
				c.BackstopGrace = grace
				c.FreeDisk = func(string) (uint64, error) { return 0, nil } // always too low
			}
			a := e.start()
			events, _ := a.Watch(t.Context())
			start := time.Now()
			e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.EndAt = start.Add(time.Minute) })
			// The control plane tries to pause at the end time and retries.
			time.Sleep(time.Minute)
			for range 12 {
				if _, err := a.Pause(context.Background(), "sb1", nodeapi.PauseRequest{Memory: true}); err == nil {
					t.Fatal("pause on a full disk succeeded")
				}
				if d, _ := a.BackstopDeadline("sb1"); d.Before(time.Now().Add(grace)) {
					t.Fatalf("deadline %s after start, want at least now + grace after a refusal", d.Sub(start))
				}
				time.Sleep(10 * time.Second)
				if _, ok := pollEvent(t, events); ok {
					t.Fatalf("backstop fired at %s while the pause was being refused", time.Since(start))
				}
			}
			// The control plane degrades to a filesystem-only pause.
			if _, err := a.Pause(context.Background(), "sb1", nodeapi.PauseRequest{}); err != nil {
				t.Fatalf("filesystem-only pause: %v", err)
			}
			time.Sleep(time.Hour)
			if ev, ok := pollEvent(t, events); ok {
				t.Errorf("event for a paused sandbox: %+v", ev)
			}
		})
	})

	t.Run("resume re-arms", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, fake.Config{})
			e.tune = func(c *node.Config) { c.BackstopGrace = grace }
			a := e.start()
			events, _ := a.Watch(t.Context())
			start := time.Now()
			e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.EndAt = start.Add(time.Minute) })
			if _, err := a.Pause(context.Background(), "sb1", nodeapi.PauseRequest{Memory: true}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Hour)
			if ev, ok := pollEvent(t, events); ok {
				t.Fatalf("event while paused: %+v", ev)
			}
			if _, err := a.Resume(context.Background(), "sb1", nodeapi.ResumeRequest{EndAt: time.Now().Add(time.Minute)}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Minute + grace - time.Second)
			if _, ok := pollEvent(t, events); ok {
				t.Fatal("backstop before the resumed end time plus grace")
			}
			time.Sleep(2 * time.Second)
			if ev, ok := pollEvent(t, events); !ok || ev.Reason != sandbox.KillTTLBackstop {
				t.Fatalf("backstop after resume: %+v, %v", ev, ok)
			}
		})
	})
}

// A runtime that hangs in start fails the create at the ready timeout and
// leaves nothing behind.
func TestStartHangTimesOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fake.Config{})
		e.tune = func(c *node.Config) { c.ReadyTimeout = 30 * time.Second }
		e.fake.SetBehavior("sb1", fake.Behavior{StartHang: true})
		a := e.start()
		start := time.Now()
		_, err := a.Create(context.Background(), createReq("sb1"))
		if err == nil {
			t.Fatal("create with a hanging runtime succeeded")
		}
		if d := time.Since(start); d != 30*time.Second {
			t.Errorf("create failed after %s, want the ready timeout (30s)", d)
		}
		e.assertNoHostObjects("sb1")
	})
}
