package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/sandbox"
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
