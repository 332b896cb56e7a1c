package webhooks_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/internal/webhooks"
)

// TestFairnessSlowReceiver: two teams' receivers on loopback, team A's
// slow (it holds every request until the test ends). Team A has many
// deliveries due before team B's one; team B's is still delivered at once,
// beside A's, and A never has more attempts in flight than its share.
func TestFairnessSlowReceiver(t *testing.T) {
	t.Parallel()
	st := storetest.SQLite(t)
	release := make(chan struct{})
	var slowInFlight, slowPeak, slowSeen atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := slowInFlight.Add(1)
		defer slowInFlight.Add(-1)
		for {
			p := slowPeak.Load()
			if n <= p || slowPeak.CompareAndSwap(p, n) {
				break
			}
		}
		slowSeen.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer slow.Close()
	defer close(release)
	fastGot := make(chan struct{}, 1)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case fastGot <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer fast.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for team, url := range map[string]string{"team-a": slow.URL, "team-b": fast.URL} {
		if err := st.CreateWebhook(ctx, &store.Webhook{ID: store.NewUID(), TeamID: team, URL: url, Secret: "s3cret-123", Enabled: true}); err != nil {
			t.Fatal(err)
		}
	}
	event := func(team string) {
		t.Helper()
		if err := st.AppendEvent(ctx, &store.Event{SandboxID: "sbx-" + team, TeamID: team, Type: store.EventKilled, Reason: sandbox.KillTimeout}); err != nil {
			t.Fatal(err)
		}
	}
	for range 40 {
		event("team-a")
	}
	event("team-b")
	pol := egress.MustParse(strings.TrimPrefix(slow.URL, "http://"), strings.TrimPrefix(fast.URL, "http://"))
	d, err := webhooks.New(webhooks.Config{Store: st, Egress: pol, Timeout: 5 * time.Minute, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	select {
	case <-fastGot:
	case <-time.After(time.Minute):
		t.Fatalf("team B's delivery was not made while team A's slow receiver held %d requests (%d seen)", slowInFlight.Load(), slowSeen.Load())
	}
	if p := slowPeak.Load(); p > 2 {
		t.Errorf("team A's slow receiver held %d attempts at once, more than a team's share of 2", p)
	}
}
