package leader_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/leader"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// replica is one elector over its own connection to the shared database.
type replica struct {
	st   *store.SQL
	e    *leader.Elector
	stop context.CancelFunc
	done chan struct{}
	// terms counts the runs of a While function; running says one runs.
	terms   atomic.Int32
	running atomic.Bool
}

func startReplica(t *testing.T, dsn, holder string) *replica {
	t.Helper()
	st := storetest.OpenPostgres(t, dsn)
	e, err := leader.New(leader.Config{Leases: st, Holder: holder, TTL: 1500 * time.Millisecond, Renew: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{st: st, e: e, stop: cancel, done: make(chan struct{})}
	whileDone := make(chan struct{})
	go func() { defer close(r.done); e.Run(ctx) }()
	go func() {
		defer close(whileDone)
		e.While(ctx, func(ctx context.Context) {
			r.terms.Add(1)
			r.running.Store(true)
			<-ctx.Done()
			r.running.Store(false)
		})
	}()
	t.Cleanup(func() { cancel(); <-r.done; <-whileDone })
	return r
}

// eventually waits (bounded) for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// leaderOf waits until one of a and b leads and checks that the other
// does not and that the lease row names the leader.
func leaderOf(t *testing.T, a, b *replica) (lead, other *replica) {
	t.Helper()
	eventually(t, "a replica leads", func() bool { return a.e.IsLeader() || b.e.IsLeader() })
	lead, other = a, b
	if b.e.IsLeader() {
		lead, other = b, a
	}
	if other.e.IsLeader() {
		t.Fatalf("both %s and %s lead", a.e.Holder(), b.e.Holder())
	}
	holder, err := other.st.LeaseHolder(context.Background(), leader.DefaultName, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if holder != lead.e.Holder() {
		t.Fatalf("lease row names %q, the leader is %q", holder, lead.e.Holder())
	}
	return lead, other
}

// TestOneLeaderThenHandover: of two replicas over one database exactly
// one leads and runs the singletons, over many renewals; when it stops,
// the other takes over.
func TestOneLeaderThenHandover(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	a, b := startReplica(t, dsn, "a"), startReplica(t, dsn, "b")
	lead, other := leaderOf(t, a, b)
	eventually(t, "the leader runs its singletons", lead.running.Load)
	for range 20 { // many renewals: leadership does not move or double
		time.Sleep(50 * time.Millisecond)
		if !lead.e.IsLeader() || other.e.IsLeader() || other.running.Load() {
			t.Fatalf("leadership moved without a stop: %s leads %v, %s leads %v (running %v)",
				lead.e.Holder(), lead.e.IsLeader(), other.e.Holder(), other.e.IsLeader(), other.running.Load())
		}
	}
	// A poke by the follower reaches the leader (a term start signals too).
	waitPoke := func(what string) {
		t.Helper()
		select {
		case <-lead.e.Pokes():
		case <-time.After(30 * time.Second):
			t.Fatalf("no poke signalled: %s", what)
		}
	}
	waitPoke("at the start of the term")
	if err := other.e.Poke(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitPoke("after the follower's poke")
	select {
	case <-other.e.Pokes():
		t.Fatal("the follower was signalled a poke")
	default:
	}
	lead.stop()
	<-lead.done
	eventually(t, "the stopped replica's singletons end", func() bool { return !lead.running.Load() })
	// The stop released the lease: the other takes it at its next try.
	eventually(t, "the other replica leads", other.e.IsLeader)
	eventually(t, "the other replica runs the singletons", other.running.Load)
	if lead.e.IsLeader() {
		t.Fatal("the stopped replica still leads")
	}
}

// TestFailoverWhenTheLeaderLosesTheDatabase: a leader that can no longer
// renew (its database connection is gone, so it cannot release either)
// steps down before its lease expires, and the other replica takes the
// expired lease; the two never lead at once.
func TestFailoverWhenTheLeaderLosesTheDatabase(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	a, b := startReplica(t, dsn, "a"), startReplica(t, dsn, "b")
	lead, other := leaderOf(t, a, b)
	eventually(t, "the leader runs its singletons", lead.running.Load)
	cut := time.Now()
	lead.st.Close()
	eventually(t, "the other replica leads", func() bool {
		if other.e.IsLeader() && lead.e.IsLeader() {
			t.Fatal("both replicas lead")
		}
		return other.e.IsLeader()
	})
	took := time.Since(cut)
	if lead.e.IsLeader() {
		t.Fatal("the cut-off replica still leads")
	}
	eventually(t, "the cut-off replica's singletons end", func() bool { return !lead.running.Load() })
	eventually(t, "the new leader runs the singletons", other.running.Load)
	if n := other.terms.Load(); n != 1 {
		t.Fatalf("the new leader ran its singletons %d times, want 1", n)
	}
	t.Logf("takeover %s after the leader lost its database (lease ttl 1.5s)", took)
}

func TestConfig(t *testing.T) {
	t.Parallel()
	if _, err := leader.New(leader.Config{}); err == nil {
		t.Fatal("no leases accepted")
	}
	if _, err := leader.New(leader.Config{Leases: storetest.SQLite(t), TTL: time.Second, Renew: time.Second}); err == nil {
		t.Fatal("a renew interval as long as the ttl accepted")
	}
}

// TestSQLiteLeads: the single process of warren serve leads at once.
func TestSQLiteLeads(t *testing.T) {
	t.Parallel()
	e, err := leader.New(leader.Config{Leases: storetest.SQLite(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "it leads", e.IsLeader)
}
