package placement_test

import (
	"context"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/placement"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// record stores sandbox id as the lifecycle does before it asks a node:
// running, on node nodeID, in execution exec.
func record(t *testing.T, st *store.SQL, id, nodeID, exec string) {
	t.Helper()
	if err := st.CreateSandbox(context.Background(), &store.Sandbox{ID: id, TeamID: "t", TemplateID: "base", State: sandbox.StateRunning,
		Spec: store.Spec{NodeID: nodeID, ExecutionID: exec}}); err != nil {
		t.Fatal(err)
	}
}

// TestWatchTakesOnlyTheNodesOwnEvents is a compromised node's second attack:
// node A sends Watch events for node B's sandboxes (which would kill them,
// and give back B's reservations). Only events of sandboxes placed on the
// reporting node, naming their current execution, pass.
func TestWatchTakesOnlyTheNodesOwnEvents(t *testing.T) {
	t.Parallel()
	st, f := storetest.SQLite(t), fleet{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := watched{Node: register(t, st, f, "a", 4, 4096), started: make(chan struct{}, 64)}
	register(t, st, f, "b", 4, 4096)
	dial := func(n *store.Node) nodeapi.Service {
		if n.ID == "a" {
			return a
		}
		return f.dial(n)
	}
	p, err := placement.New(placement.Config{Store: st, Dial: dial, WatchRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reqB := createReq("sb-on-b")
	record(t, st, reqB.ID, "", reqB.ExecutionID)
	for _, n := range []string{"a", "b"} {
		if err := st.ReserveOnNode(ctx, n, "held-"+n, store.NodeResources{VCPUs: 1, MemoryMB: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.ReserveOnNode(ctx, "b", reqB.ID, store.NodeResources{VCPUs: 1, MemoryMB: 512}); err != nil {
		t.Fatal(err)
	}
	reqA := createReq("sb-on-a")
	record(t, st, reqA.ID, "a", reqA.ExecutionID)
	events, err := p.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-a.started // a's watch is in place: its forgeries come first
	for _, ev := range []nodeapi.Event{
		{Type: nodeapi.EventKilled, SandboxID: reqB.ID, ExecutionID: reqB.ExecutionID, Reason: sandbox.KillOOM}, // b's sandbox
		{Type: nodeapi.EventExited, SandboxID: "no-such-sandbox", ExecutionID: "e"},                             // none
		{Type: nodeapi.EventExited, SandboxID: reqA.ID, ExecutionID: "an-older-execution"},                      // its own, stale
		{Type: nodeapi.EventExited, SandboxID: reqA.ID},                                                         // no execution
	} {
		ev.At = time.Now()
		a.Emit(ev)
	}
	// Then its own: the events come in order, so once it is through,
	// whatever of the forgeries would pass has.
	a.Emit(nodeapi.Event{Type: nodeapi.EventExited, SandboxID: reqA.ID, ExecutionID: reqA.ExecutionID, Reason: sandbox.KillOOM, At: time.Now()})
	var got []nodeapi.Event
	for len(got) == 0 || got[len(got)-1].SandboxID != reqA.ID || got[len(got)-1].ExecutionID != reqA.ExecutionID {
		select {
		case <-t.Context().Done():
			t.Fatalf("no event of a's own sandbox; got %+v", got)
		case ev := <-events:
			got = append(got, ev)
		}
	}
	for _, ev := range got {
		if ev.SandboxID != reqA.ID || ev.ExecutionID != reqA.ExecutionID {
			t.Errorf("node a's event %+v passed", ev)
		}
	}
	if nb, _ := st.GetNode(ctx, "b"); nb.Allocated.MemoryMB != 513 {
		t.Errorf("node b's allocation after a's forged event: %+v, want its reservations kept", nb.Allocated)
	}
}
