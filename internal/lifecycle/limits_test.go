package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// TestAutoPauseOverPausedLimit: a sandbox whose timeout would auto-pause it
// while its team keeps as many paused sandboxes as it may is killed
// (timeout) instead; an explicit pause gets PausedLimitError.
func TestAutoPauseOverPausedLimit(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, storetest.SQLite(t), fakenode.New(), func(c *lifecycle.Config) {
			c.TeamLimits = func(context.Context, string) (lifecycle.TeamLimits, error) {
				return lifecycle.TeamLimits{MaxPaused: 1}, nil
			}
		})
		first := h.create(lifecycle.CreateParams{Timeout: time.Hour})
		if err := h.m.Pause(ctx, "team", first.ID, true); err != nil {
			t.Fatal(err)
		}
		second := h.create(lifecycle.CreateParams{Timeout: time.Hour})
		var full *lifecycle.PausedLimitError
		if err := h.m.Pause(ctx, "team", second.ID, true); !errors.As(err, &full) || full.Limit != 1 {
			t.Fatalf("pause over the limit: %v", err)
		}
		h.wantState(second.ID, sandbox.StateRunning, "")
		auto := h.create(lifecycle.CreateParams{Timeout: 10 * time.Second, AutoPause: true, AutoPauseMemory: true})
		time.Sleep(11 * time.Second)
		synctest.Wait()
		h.wantState(auto.ID, sandbox.StateKilled, sandbox.KillTimeout)
		h.wantState(first.ID, sandbox.StatePaused, "")
		// Another team is not bound by this team's paused sandboxes.
		other := h.create(lifecycle.CreateParams{TeamID: "other", Timeout: time.Hour})
		if err := h.m.Pause(ctx, "other", other.ID, true); err != nil {
			t.Fatalf("pause of another team: %v", err)
		}
	})
}

// TestResumeCountsCreatesInProgress: a create of one store write holds its
// team's concurrency slot while its node starts it (no row yet), so a
// resume meanwhile is refused as a create would be.
func TestResumeCountsCreatesInProgress(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := start(t, storetest.SQLite(t), fakenode.New(), func(c *lifecycle.Config) {
			c.TeamLimits = func(context.Context, string) (lifecycle.TeamLimits, error) {
				return lifecycle.TeamLimits{MaxConcurrent: 2}, nil
			}
		})
		p := lifecycle.CreateParams{Timeout: time.Hour, MaxConcurrent: 2}
		paused := h.create(p)
		if err := h.m.Pause(ctx, "team", paused.ID, true); err != nil {
			t.Fatal(err)
		}
		h.create(p)
		entered, release := make(chan struct{}), make(chan struct{})
		h.node.BeforeCreate = func(nodeapi.CreateRequest) { close(entered); <-release }
		created := make(chan error, 1)
		go func() {
			_, err := h.m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour, MaxConcurrent: 2})
			created <- err
		}()
		<-entered
		var le *lifecycle.LimitError
		if _, err := h.m.Resume(ctx, "team", paused.ID, time.Hour, nil); !errors.As(err, &le) {
			t.Errorf("resume while a create takes the last slot: %v, want a limit error", err)
		}
		close(release)
		if err := <-created; err != nil {
			t.Fatal(err)
		}
		if n, err := h.st.CountSandboxes(ctx, "team", store.ActiveStates...); err != nil || n != 2 {
			t.Fatalf("active sandboxes = %d, %v; want the limit, 2", n, err)
		}
	})
}
