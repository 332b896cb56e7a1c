package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// replica is one API replica's Manager over its own connection to the
// shared database, run with real time.
type replica struct {
	m    *lifecycle.Manager
	reg  *prometheus.Registry
	stop func()
}

func startReplica(t *testing.T, st store.Store, n nodeapi.Service, tune ...func(*lifecycle.Config)) *replica {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := lifecycle.Config{Store: st, Node: n, AllNodes: true, Registry: reg, StartGrace: time.Hour}
	for _, f := range tune {
		f(&cfg)
	}
	m, err := lifecycle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return &replica{m: m, reg: reg, stop: stop}
}

// TestReplicasKillAnExpiryOnce: two Managers over one Postgres database
// and one node both arm a sandbox's deadline (the creator by Create, the
// other by Reconcile, as a new leader does); both evictors fire, and the
// row lock of the kill's transition lets one record it: one killed event,
// one count in sandbox_killed_total over both.
func TestReplicasKillAnExpiryOnce(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	stA, stB := storetest.OpenPostgres(t, dsn), storetest.OpenPostgres(t, dsn)
	n := fakenode.New()
	a, b := startReplica(t, stA, n), startReplica(t, stB, n)
	ctx := context.Background()
	sb, err := a.m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*replica{"creator": a, "other": b} {
		if at, ok := r.m.Deadline(sb.ID); !ok || !at.Equal(sb.EndAt) {
			t.Fatalf("%s replica: deadline %v (armed %v), want %v", name, at, ok, sb.EndAt)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, armedA := a.m.Deadline(sb.ID)
		_, armedB := b.m.Deadline(sb.ID)
		got, err := stB.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == sandbox.StateKilled && !armedA && !armedB {
			if got.KillReason != sandbox.KillTimeout {
				t.Fatalf("kill reason %q, want timeout", got.KillReason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: state %s, armed on a %v, b %v", sb.ID, got.State, armedA, armedB)
		}
	}
	a.stop() // waits for its evictor's kills to finish
	b.stop()
	events, err := stA.ListEvents(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, e := range events {
		if e.Type == store.EventKilled {
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("%d killed events for one expiry, want 1: %+v", killed, events)
	}
	total := 0.0
	for _, r := range []*replica{a, b} {
		total += (&harness{t: t, reg: r.reg}).killed(sandbox.KillTimeout.String())
	}
	if total != 1 {
		t.Fatalf("sandbox_killed_total{timeout} over both replicas = %v, want 1", total)
	}
}

// TestReconcileLeavesAnotherReplicasStart: a reconcile by one replica
// (the leader; replicas run with a StartGrace) while another replica starts a sandbox (its row says
// starting, the node does not list it yet) leaves it to its creator: it
// runs, and nothing was killed.
func TestReconcileLeavesAnotherReplicasStart(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	stA, stB := storetest.OpenPostgres(t, dsn), storetest.OpenPostgres(t, dsn)
	n := fakenode.New()
	a, b := startReplica(t, stA, n), startReplica(t, stB, n)
	ctx := context.Background()
	reconciled := make(chan error, 1)
	n.BeforeCreate = func(nodeapi.CreateRequest) { reconciled <- b.m.Reconcile(ctx) }
	sb, err := a.m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-reconciled; err != nil {
		t.Fatal(err)
	}
	got, err := stB.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != sandbox.StateRunning {
		t.Fatalf("sandbox started by one replica while another reconciled: %s (%s), want running", got.State, got.KillReason)
	}
	for name, r := range map[string]*replica{"creator": a, "reconciler": b} {
		if k := (&harness{t: t, reg: r.reg}).killed(sandbox.KillNodeLost.String()); k != 0 {
			t.Fatalf("%s counted %v node_lost kills", name, k)
		}
	}
}

// TestReplicasKeepTeamLimit: creates of one team sent at once to two
// Managers over one database never run more sandboxes than the team's
// limit, on both create paths: the API replicas' (every node, a starting
// row counted in Postgres before the node call) and one store write
// (counted again in the write's transaction; a create refused there is
// stopped on its node). On Postgres each Manager has its own connection
// pool, as two processes do. The Managers do not Run: a one-write
// Manager's reconcile would take the other's creates in progress for
// orphans (why the API role keeps its starting row, create.go).
func TestReplicasKeepTeamLimit(t *testing.T) {
	t.Parallel()
	for name, open := range storetest.Processes() {
		for _, allNodes := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/all nodes %t", name, allNodes), func(t *testing.T) {
				t.Parallel()
				const limit, each = 3, 4
				stA, stB := open(t)
				n := fakenode.New()
				var ms []*lifecycle.Manager
				for _, st := range []store.Store{stA, stB} {
					m, err := lifecycle.New(lifecycle.Config{Store: st, Node: n, AllNodes: allNodes})
					if err != nil {
						t.Fatal(err)
					}
					ms = append(ms, m)
				}
				ctx := context.Background()
				p := lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour, MaxConcurrent: limit}
				errs := make(chan error, 2*each)
				for range each {
					for _, m := range ms {
						go func() { _, err := m.Create(ctx, p); errs <- err }()
					}
				}
				ok := 0
				for range 2 * each {
					err := <-errs
					var le *lifecycle.LimitError
					switch {
					case err == nil:
						ok++
					case !errors.As(err, &le):
						t.Errorf("create: %v, want success or a limit error", err)
					}
				}
				if ok == 0 || ok > limit {
					t.Fatalf("%d creates succeeded, want 1 to %d", ok, limit)
				}
				if got, err := stA.CountSandboxes(ctx, "team", store.ActiveStates...); err != nil || got != ok {
					t.Fatalf("active sandboxes in the store = %d, %v; want the %d created", got, err, ok)
				}
				if onNode, err := n.List(ctx); err != nil || len(onNode) != ok {
					t.Fatalf("%d sandboxes on the node, %v; want the %d created", len(onNode), err, ok)
				}
			})
		}
	}
}
