package apirole

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// TestPokingStoreWakesOnEveryEvent: each lifecycle write that adds an
// event wakes the webhook dispatcher, the create's one write (row and
// created event together) as well as a kill's transition, so no delivery
// waits for the dispatcher's next poll.
func TestPokingStoreWakesOnEveryEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var pokes atomic.Int32
	st := pokingStore{Store: storetest.SQLite(t), poke: func() { pokes.Add(1) }}
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: fakenode.New()})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := lc.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if n := pokes.Load(); n < 1 {
		t.Fatalf("create woke the dispatcher %d times, want at least once", n)
	}
	before := pokes.Load()
	if err := lc.Kill(ctx, "team", sb.ID, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if n := pokes.Load() - before; n < 1 {
		t.Fatalf("kill woke the dispatcher %d times, want at least once", n)
	}
}
