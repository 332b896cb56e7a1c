package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

func TestNodeRegistry(t *testing.T) {
	t.Parallel()
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("heartbeat and admin status", func(t *testing.T) { testNodeHeartbeat(t, open(t)) })
			t.Run("reservations", func(t *testing.T) { testNodeReservations(t, open(t)) })
			t.Run("stale nodes", func(t *testing.T) { testStaleNodes(t, open(t)) })
		})
	}
}

func testNodeHeartbeat(t *testing.T, s *store.SQL) {
	ctx := context.Background()
	n := &store.Node{ID: "n1", RPCAddress: "http://10.0.0.1:5009", ProxyAddress: "10.0.0.1:5010", BootID: "b1", Version: "v1",
		Capacity: store.NodeResources{VCPUs: 8, MemoryMB: 16384}, Templates: []string{"build-a"},
		Pools: []store.NodePool{{TemplateID: "base", BuildID: "build-a", Size: 2, Ready: 1}}}
	prev, err := s.HeartbeatNode(ctx, n)
	if err != nil || prev != nil {
		t.Fatalf("first heartbeat: prev %+v, %v", prev, err)
	}
	got, err := s.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status() != store.NodeReady || got.Capacity != n.Capacity || !got.HoldsTemplate("build-a") || len(got.Pools) != 1 || got.LastHeartbeat.IsZero() {
		t.Fatalf("node after registration: %+v", got)
	}
	if err := s.SetNodeAdminStatus(ctx, "n1", store.NodeDraining); err != nil {
		t.Fatal(err)
	}
	n.BootID = "b2"
	prev, err = s.HeartbeatNode(ctx, n)
	if err != nil || prev == nil || prev.BootID != "b1" {
		t.Fatalf("second heartbeat: prev %+v, %v", prev, err)
	}
	got, _ = s.GetNode(ctx, "n1")
	if got.Status() != store.NodeDraining || got.Schedulable() || got.BootID != "b2" {
		t.Fatalf("a heartbeat must keep the admin status: %+v", got)
	}
	if err := s.SetNodeAdminStatus(ctx, "n1", "bogus"); !errdefs.IsInvalid(err) {
		t.Fatalf("bogus admin status: %v", err)
	}
	if err := s.SetNodeAdminStatus(ctx, "nope", store.NodeCordoned); !errdefs.IsNotFound(err) {
		t.Fatalf("unknown node: %v", err)
	}
}

func testNodeReservations(t *testing.T, s *store.SQL) {
	ctx := context.Background()
	if _, err := s.HeartbeatNode(ctx, &store.Node{ID: "n1", BootID: "b", Capacity: store.NodeResources{VCPUs: 4, MemoryMB: 4096}}); err != nil {
		t.Fatal(err)
	}
	sb := &store.Sandbox{ID: "sb1", TeamID: "t", TemplateID: "base", State: sandbox.StateStarting, Spec: store.Spec{NodeID: "local"}}
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	need := store.NodeResources{VCPUs: 2, MemoryMB: 2048}
	if err := s.ReserveOnNode(ctx, "n1", "sb1", need); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveOnNode(ctx, "n1", "sb1", need); err != nil {
		t.Fatalf("a second reservation of one sandbox on its node: %v", err)
	}
	if got, _ := s.GetSandbox(ctx, "sb1"); got.Spec.NodeID != "n1" {
		t.Fatalf("sandbox row's node: %q", got.Spec.NodeID)
	}
	if got, _ := s.ListSandboxes(ctx, store.SandboxFilter{NodeID: "n1"}); len(got) != 1 {
		t.Fatalf("sandboxes of n1: %d", len(got))
	}
	if err := s.ReserveOnNode(ctx, "n1", "sb2", need); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveOnNode(ctx, "n1", "sb3", store.NodeResources{VCPUs: 1, MemoryMB: 1}); !errdefs.IsExhausted(err) {
		t.Fatalf("a reservation over capacity: %v", err)
	}
	n, _ := s.GetNode(ctx, "n1")
	if n.Allocated != (store.NodeResources{VCPUs: 4, MemoryMB: 4096}) {
		t.Fatalf("allocated %+v", n.Allocated)
	}
	for i, want := range []bool{true, false} {
		if ok, err := s.ReleaseReservation(ctx, "sb2"); err != nil || ok != want {
			t.Fatalf("release %d: %v, %v", i, ok, err)
		}
	}
	n, _ = s.GetNode(ctx, "n1")
	if n.Allocated != need {
		t.Fatalf("allocated after one release %+v", n.Allocated)
	}
	if err := s.SetNodeAdminStatus(ctx, "n1", store.NodeCordoned); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveOnNode(ctx, "n1", "sb4", store.NodeResources{VCPUs: 1}); !errdefs.IsExhausted(err) {
		t.Fatalf("a reservation on a cordoned node: %v", err)
	}
	if err := s.ClearNodeReservations(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if n, _ = s.GetNode(ctx, "n1"); n.Allocated != (store.NodeResources{}) {
		t.Fatalf("allocated after clear %+v", n.Allocated)
	}
	if counts, err := s.CountSandboxesByNode(ctx); err != nil || counts["n1"] != 1 {
		t.Fatalf("sandboxes by node: %v, %v", counts, err)
	}
}

func testStaleNodes(t *testing.T, s *store.SQL) {
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := s.HeartbeatNode(ctx, &store.Node{ID: id, BootID: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := s.MarkStaleNodes(ctx, time.Now().Add(time.Minute), store.NodeUnreachable, store.NodeReady)
	if err != nil || len(ids) != 2 {
		t.Fatalf("stale: %v, %v", ids, err)
	}
	ids, err = s.MarkStaleNodes(ctx, time.Now().Add(time.Minute), store.NodeUnreachable, store.NodeReady)
	if err != nil || len(ids) != 0 {
		t.Fatalf("a second mark must change nothing: %v, %v", ids, err)
	}
	if ids, _ := s.MarkStaleNodes(ctx, time.Now().Add(-time.Hour), store.NodeLost, store.NodeUnreachable); len(ids) != 0 {
		t.Fatalf("fresh nodes marked lost: %v", ids)
	}
	if _, err := s.HeartbeatNode(ctx, &store.Node{ID: "a", BootID: "x"}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.GetNode(ctx, "a"); n.Liveness != store.NodeReady {
		t.Fatalf("a heartbeat must make the node ready again: %s", n.Liveness)
	}
}

// TestNodeReservationsAcrossProcesses: two stores over one Postgres
// database (two API replicas) reserving at once never exceed a node's
// capacity.
func TestNodeReservationsAcrossProcesses(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	a, b := storetest.OpenPostgres(t, dsn), storetest.OpenPostgres(t, dsn)
	ctx := context.Background()
	if _, err := a.HeartbeatNode(ctx, &store.Node{ID: "n", BootID: "x", Capacity: store.NodeResources{VCPUs: 10, MemoryMB: 10240}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	won := 0
	var wg sync.WaitGroup
	for i := range 40 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			err := s.ReserveOnNode(ctx, "n", sandbox.NewID(), store.NodeResources{VCPUs: 1, MemoryMB: 1024})
			switch {
			case err == nil:
				mu.Lock()
				won++
				mu.Unlock()
			case !errdefs.IsExhausted(err):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	n, err := a.GetNode(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if won != 10 || n.Allocated != n.Capacity {
		t.Fatalf("%d reservations won, allocated %+v of %+v", won, n.Allocated, n.Capacity)
	}
}
