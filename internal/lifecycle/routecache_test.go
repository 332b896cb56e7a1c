package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/route"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// moveOnNode changes where the node says id is without the store knowing:
// only an uncached Route sees it.
func moveOnNode(t *testing.T, n *fakenode.Node, id, addr string) {
	t.Helper()
	s, err := n.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	s.Address = addr
	n.Put(s)
}

// TestRouteCache: with a change feed, a running sandbox's route is served
// from memory for the TTL; any change of its row (pause, kill) evicts it
// at once, so a paused or killed sandbox is never routed from the cache.
func TestRouteCache(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := storetest.SQLite(t)
		n := fakenode.New()
		h := start(t, st, n, func(c *lifecycle.Config) { c.SandboxChanges = st.WatchSandboxes })
		synctest.Wait() // the feed is live
		sb := h.create(lifecycle.CreateParams{Timeout: time.Hour})
		r1, err := h.m.Route(ctx, sb.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		moveOnNode(t, n, sb.ID, "10.9.9.9:49983")
		if r, err := h.m.Route(ctx, sb.ID, nil); err != nil || r.Address != r1.Address {
			t.Fatalf("second route = %+v, %v; want the cached %s", r, err, r1.Address)
		}
		// The admission still sees the tokens of a cached route.
		refuse := errors.New("refused")
		if _, err := h.m.Route(ctx, sb.ID, func(a *route.Admission) error {
			if a.EnvdAccessToken != r1.EnvdAccessToken || a.Paused {
				t.Errorf("admission = %+v", a)
			}
			return refuse
		}); !errors.Is(err, refuse) {
			t.Fatalf("route with a refusing admission: %v", err)
		}
		time.Sleep(lifecycle.DefaultRouteCacheTTL)
		if r, err := h.m.Route(ctx, sb.ID, nil); err != nil || r.Address != "10.9.9.9:49983" {
			t.Fatalf("route after the TTL = %+v, %v; want the node's new address", r, err)
		}
		// A pause evicts: the paused sandbox is refused, not routed.
		if err := h.m.Pause(ctx, "team", sb.ID, true); err != nil {
			t.Fatal(err)
		}
		if _, err := h.m.Route(ctx, sb.ID, nil); !errors.Is(err, route.ErrPaused) {
			t.Fatalf("route of a paused sandbox: %v, want ErrPaused", err)
		}
		// A kill evicts.
		sb2 := h.create(lifecycle.CreateParams{Timeout: time.Hour})
		if _, err := h.m.Route(ctx, sb2.ID, nil); err != nil {
			t.Fatal(err)
		}
		if err := h.m.Kill(ctx, "team", sb2.ID, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
		if _, err := h.m.Route(ctx, sb2.ID, nil); !errdefs.IsNotFound(err) {
			t.Fatalf("route of a killed sandbox: %v, want not found", err)
		}
	})
}

// TestRouteCacheAcrossReplicas: two Managers over one Postgres database; a
// route cached by one is evicted when the other kills the sandbox
// (LISTEN/NOTIFY), well before the TTL would.
func TestRouteCacheAcrossReplicas(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	sa, sb := storetest.OpenPostgres(t, dsn), storetest.OpenPostgres(t, dsn)
	n := fakenode.New()
	ttl := time.Hour // only an eviction can end a cached route in this test
	cache := func(st *store.SQL) func(*lifecycle.Config) {
		return func(c *lifecycle.Config) { c.SandboxChanges, c.RouteCacheTTL = st.WatchSandboxes, ttl }
	}
	a, b := startReplica(t, sa, n, cache(sa)).m, startReplica(t, sb, n, cache(sb)).m
	ctx := context.Background()
	s, err := a.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var r1 *route.Route
	// b's feed goes live shortly after its start; until then it does not cache.
	for deadline := time.Now().Add(30 * time.Second); ; {
		r, err := b.Route(ctx, s.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		moveOnNode(t, n, s.ID, "10.9.9.8:49983")
		if r2, err := b.Route(ctx, s.ID, nil); err == nil && r2.Address == r.Address {
			r1 = r
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b never served a cached route")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := a.Kill(ctx, "team", s.ID, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := b.Route(ctx, s.ID, nil)
		if errdefs.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still routes the killed sandbox (cached %s): %v", r1.Address, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkRoute is what one proxied request pays to find its sandbox,
// with and without the route cache, over each store (the node is the
// in-memory fake: a node RPC would add its round trip to the uncached
// figure). go test -run - -bench Route ./internal/lifecycle/
func BenchmarkRoute(b *testing.B) {
	stores := map[string]func(testing.TB) *store.SQL{"sqlite": storetest.SQLite}
	if storetest.PostgresAvailable() {
		stores["postgres"] = storetest.Postgres
	}
	for name, open := range stores {
		for _, cached := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/cache=%t", name, cached), func(b *testing.B) {
				st := open(b)
				cfg := lifecycle.Config{Store: st, Node: fakenode.New()}
				if cached {
					cfg.SandboxChanges = st.WatchSandboxes
				}
				m, err := lifecycle.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- m.Run(ctx) }()
				defer func() { cancel(); <-done }()
				s, err := m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond) // the change feed goes live
				b.ResetTimer()
				for b.Loop() {
					if _, err := m.Route(ctx, s.ID, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
