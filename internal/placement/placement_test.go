package placement_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/placement"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// backends opens a store per database: SQLite, and Postgres when
// $WARREN_TEST_POSTGRES_DSN is set (a failure under CI=true otherwise).
func backends() map[string]func(t *testing.T) *store.SQL {
	return map[string]func(t *testing.T) *store.SQL{
		"sqlite":   func(t *testing.T) *store.SQL { return storetest.SQLite(t) },
		"postgres": func(t *testing.T) *store.SQL { return storetest.Postgres(t) },
	}
}

// fleet is a set of fake nodes by ID, dialed by the placements built on it.
type fleet map[string]*fakenode.Node

func (f fleet) dial(n *store.Node) nodeapi.Service {
	fn, ok := f[n.ID]
	if !ok {
		panic("dial of unknown node " + n.ID)
	}
	return fn
}

func newPlacement(t *testing.T, st *store.SQL, f fleet) *placement.Service {
	t.Helper()
	p, err := placement.New(placement.Config{Store: st, Dial: f.dial})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// register adds node id with vcpus and memMB to st and a fake node for it
// to f.
func register(t *testing.T, st *store.SQL, f fleet, id string, vcpus, memMB int64) *fakenode.Node {
	t.Helper()
	if _, err := st.HeartbeatNode(context.Background(), &store.Node{ID: id, RPCAddress: "http://" + id, BootID: "boot-1",
		Capacity: store.NodeResources{VCPUs: vcpus, MemoryMB: memMB}}); err != nil {
		t.Fatal(err)
	}
	if f[id] == nil {
		f[id] = fakenode.New()
	}
	return f[id]
}

func createReq(id string) nodeapi.CreateRequest {
	return nodeapi.CreateRequest{ID: id, ExecutionID: sandbox.NewExecutionID(), TeamID: "t",
		Template:  nodeapi.Template{ID: "base", BuildID: "build-base"},
		Resources: sandbox.Resources{VCPUs: 1, MemoryMB: 512}, EndAt: time.Now().Add(time.Hour)}
}

// onNode returns the IDs of the sandboxes fake node n runs.
func onNode(t *testing.T, n *fakenode.Node) map[string]bool {
	t.Helper()
	sbs, err := n.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, sb := range sbs {
		out[sb.ID] = true
	}
	return out
}

// TestReplicasNeverOvercommit: two placements ("API replicas") over one
// Postgres database create at once on three nodes of 4 vCPUs; exactly the
// 12 sandboxes that fit are created, no node holds more than it has, and
// each node's allocation is what it runs.
func TestReplicasNeverOvercommit(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	stA, stB := storetest.OpenPostgres(t, dsn), storetest.OpenPostgres(t, dsn)
	f := fleet{}
	for _, id := range []string{"n1", "n2", "n3"} {
		register(t, stA, f, id, 4, 8192)
	}
	replicas := []*placement.Service{newPlacement(t, stA, f), newPlacement(t, stB, f)}
	ctx := context.Background()
	var mu sync.Mutex
	created, refused := 0, 0
	var wg sync.WaitGroup
	for i := range 40 {
		p := replicas[i%2]
		wg.Go(func() {
			_, err := p.Create(ctx, createReq(fmt.Sprintf("sb%02d", i)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errdefs.IsExhausted(err):
				refused++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if created != 12 || refused != 28 {
		t.Fatalf("%d created and %d refused, want 12 and 28", created, refused)
	}
	for id, n := range f {
		runs := len(onNode(t, n))
		node, err := stA.GetNode(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if runs > 4 || node.Allocated.VCPUs != int64(runs) || node.Allocated.MemoryMB != int64(runs)*512 {
			t.Errorf("node %s runs %d sandboxes, allocated %+v of %+v", id, runs, node.Allocated, node.Capacity)
		}
	}
}

// TestRefusalMovesToNextNode: a node that refuses a create gets its
// reservation back and the next candidate takes the sandbox; when every
// node refuses the create is ErrExhausted.
func TestRefusalMovesToNextNode(t *testing.T) {
	t.Parallel()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, f := open(t), fleet{}
			bad := register(t, st, f, "refuses", 8, 8192)
			bad.CreateErr = fmt.Errorf("node full: %w", errdefs.ErrExhausted)
			good := register(t, st, f, "accepts", 8, 8192)
			p := newPlacement(t, st, f)
			ctx := context.Background()
			for i := range 5 {
				if _, err := p.Create(ctx, createReq(fmt.Sprintf("sb%d", i))); err != nil {
					t.Fatal(err)
				}
			}
			if got := len(onNode(t, good)); got != 5 {
				t.Fatalf("accepting node runs %d sandboxes, want 5", got)
			}
			if n, _ := st.GetNode(ctx, "refuses"); n.Allocated != (store.NodeResources{}) {
				t.Fatalf("the refusing node kept a reservation: %+v", n.Allocated)
			}
			good.CreateErr = fmt.Errorf("down: %w", errdefs.ErrUnavailable)
			if _, err := p.Create(ctx, createReq("last")); !errdefs.IsExhausted(err) {
				t.Fatalf("create when every node refuses: %v", err)
			}
			if n, _ := st.GetNode(ctx, "accepts"); n.Allocated.VCPUs != 5 {
				t.Fatalf("accepting node allocated %+v, want its 5 sandboxes", n.Allocated)
			}
		})
	}
}

// TestUnschedulableNodesGetNoCreates: draining, cordoned and unreachable
// nodes get no creates; a full ready node makes creates ErrExhausted.
func TestUnschedulableNodesGetNoCreates(t *testing.T) {
	t.Parallel()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, f := open(t), fleet{}
			ctx := context.Background()
			register(t, st, f, "unreachable", 64, 65536)
			if ids, err := st.MarkStaleNodes(ctx, time.Now().Add(time.Second), store.NodeUnreachable, store.NodeReady); err != nil || len(ids) != 1 {
				t.Fatalf("mark unreachable: %v, %v", ids, err)
			}
			register(t, st, f, "draining", 64, 65536)
			register(t, st, f, "cordoned", 64, 65536)
			ready := register(t, st, f, "ready", 3, 65536)
			if err := st.SetNodeAdminStatus(ctx, "draining", store.NodeDraining); err != nil {
				t.Fatal(err)
			}
			if err := st.SetNodeAdminStatus(ctx, "cordoned", store.NodeCordoned); err != nil {
				t.Fatal(err)
			}
			p := newPlacement(t, st, f)
			for i := range 3 {
				if _, err := p.Create(ctx, createReq(fmt.Sprintf("sb%d", i))); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := p.Create(ctx, createReq("sb3")); !errdefs.IsExhausted(err) {
				t.Fatalf("create with the only ready node full: %v", err)
			}
			if got := len(onNode(t, ready)); got != 3 {
				t.Fatalf("ready node runs %d, want 3", got)
			}
			for _, id := range []string{"unreachable", "draining", "cordoned"} {
				if got := f[id].Calls(); len(got) != 0 {
					t.Errorf("node %s was called: %v", id, got)
				}
			}
			if err := st.SetNodeAdminStatus(ctx, "cordoned", ""); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Create(ctx, createReq("sb4")); err != nil {
				t.Fatalf("create after uncordon: %v", err)
			}
			if !onNode(t, f["cordoned"])["sb4"] {
				t.Fatal("the uncordoned node did not get the create")
			}
		})
	}
}

// TestCallsGoToTheHolder: per-sandbox calls reach the node that holds the
// sandbox (also from a second placement that did not create it, reading
// the store); a pause gives the reservation back, a resume takes it again
// on the same node, a kill gives it back.
func TestCallsGoToTheHolder(t *testing.T) {
	t.Parallel()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, f := open(t), fleet{}
			ctx := context.Background()
			a := register(t, st, f, "a", 1, 4096)
			b := register(t, st, f, "b", 1, 4096)
			p := newPlacement(t, st, f)
			for _, id := range []string{"s1", "s2"} {
				if err := st.CreateSandbox(ctx, &store.Sandbox{ID: id, TeamID: "t", TemplateID: "base", State: sandbox.StateStarting,
					Spec: store.Spec{NodeID: "local", Resources: sandbox.Resources{VCPUs: 1, MemoryMB: 512}}}); err != nil {
					t.Fatal(err)
				}
				if _, err := p.Create(ctx, createReq(id)); err != nil {
					t.Fatal(err)
				}
			}
			holderOf := map[string]*fakenode.Node{}
			for _, id := range []string{"s1", "s2"} {
				sb, err := st.GetSandbox(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				holderOf[id] = f[sb.Spec.NodeID]
				if !onNode(t, holderOf[id])[id] {
					t.Fatalf("store says %s is on %s, which does not run it", id, sb.Spec.NodeID)
				}
			}
			if holderOf["s1"] == holderOf["s2"] || (holderOf["s1"] != a && holderOf["s1"] != b) {
				t.Fatal("two 1-vCPU sandboxes on two 1-vCPU nodes must be on different nodes")
			}
			other := newPlacement(t, st, f) // a second replica: knows only the store
			if _, err := other.Pause(ctx, "s1", nodeapi.PauseRequest{}); err != nil {
				t.Fatal(err)
			}
			h := holderOf["s1"]
			n, _ := st.GetNode(ctx, nodeIDOf(f, h))
			if n.Allocated.VCPUs != 0 {
				t.Fatalf("a paused sandbox's node allocated %+v", n.Allocated)
			}
			if _, err := other.Resume(ctx, "s1", nodeapi.ResumeRequest{ExecutionID: sandbox.NewExecutionID(), EndAt: time.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if sb, err := h.Get(ctx, "s1"); err != nil || sb.State != sandbox.StateRunning {
				t.Fatalf("resumed on its node: %+v, %v", sb, err)
			}
			n, _ = st.GetNode(ctx, n.ID)
			if n.Allocated.VCPUs != 1 {
				t.Fatalf("a resumed sandbox's node allocated %+v", n.Allocated)
			}
			if err := other.Kill(ctx, "s2", sandbox.KillRequest); err != nil {
				t.Fatal(err)
			}
			if onNode(t, holderOf["s2"])["s2"] {
				t.Fatal("s2 still runs on its node after a kill")
			}
			n, _ = st.GetNode(ctx, nodeIDOf(f, holderOf["s2"]))
			if n.Allocated.VCPUs != 0 {
				t.Fatalf("a killed sandbox's node allocated %+v", n.Allocated)
			}
			if _, err := p.Get(ctx, "nope"); !errdefs.IsNotFound(err) {
				t.Fatalf("get of an unknown sandbox: %v", err)
			}
		})
	}
}

func nodeIDOf(f fleet, n *fakenode.Node) string {
	for id, fn := range f {
		if fn == n {
			return id
		}
	}
	return ""
}

// TestForkStaysOnSourceNode: a fork's copies go to the source's node,
// each reserved there; the copies it has no room for are not asked for.
func TestForkStaysOnSourceNode(t *testing.T) {
	t.Parallel()
	st, f := storetest.SQLite(t), fleet{}
	ctx := context.Background()
	a := register(t, st, f, "a", 3, 65536)
	p := newPlacement(t, st, f)
	if _, err := p.Create(ctx, createReq("src")); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSandbox(ctx, &store.Sandbox{ID: "src", TeamID: "t", TemplateID: "base", State: sandbox.StateRunning, Spec: store.Spec{NodeID: "a"}}); err != nil {
		t.Fatal(err)
	}
	register(t, st, f, "b", 64, 65536) // roomier, but not the source's
	var asked nodeapi.ForkRequest
	a.BeforeFork = func(_ string, req nodeapi.ForkRequest) { asked = req }
	forks, err := p.Fork(ctx, "src", nodeapi.ForkRequest{IDs: []string{"f1", "f2", "f3"}, EndAt: time.Now().Add(time.Hour),
		ExecutionIDs: []string{"e1", "e2", "e3"}, EnvdAccessTokens: []string{"t1", "t2", "t3"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 2 || !onNode(t, a)["f1"] || !onNode(t, a)["f2"] || onNode(t, a)["f3"] {
		t.Fatalf("forks %d; node a runs %v", len(forks), onNode(t, a))
	}
	// Each copy asked for keeps its own execution ID and token.
	if !slices.Equal(asked.IDs, []string{"f1", "f2"}) || !slices.Equal(asked.ExecutionIDs, []string{"e1", "e2"}) || !slices.Equal(asked.EnvdAccessTokens, []string{"t1", "t2"}) {
		t.Fatalf("node a was asked for %+v", asked)
	}
	if n, _ := st.GetNode(ctx, "a"); n.Allocated.VCPUs != 3 {
		t.Fatalf("node a allocated %+v, want 3 vCPUs", n.Allocated)
	}
	if len(f["b"].Calls()) != 0 {
		t.Fatalf("node b was called: %v", f["b"].Calls())
	}
}

// watched is a node whose Watch calls are announced on started.
type watched struct {
	*fakenode.Node
	started chan struct{}
}

func (w watched) Watch(ctx context.Context) (<-chan nodeapi.Event, error) {
	ch, err := w.Node.Watch(ctx)
	w.started <- struct{}{}
	return ch, err
}

// TestWatchMergesNodes: Watch delivers the events of every node, of one
// registered after it started too; an exit gives the sandbox's
// reservation back.
func TestWatchMergesNodes(t *testing.T) {
	t.Parallel()
	st, f := storetest.SQLite(t), fleet{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	nodes := map[string]watched{}
	dial := func(n *store.Node) nodeapi.Service {
		mu.Lock()
		defer mu.Unlock()
		return nodes[n.ID]
	}
	add := func(id string) watched {
		mu.Lock()
		defer mu.Unlock()
		w := watched{Node: register(t, st, f, id, 4, 4096), started: make(chan struct{}, 4)}
		nodes[id] = w
		return w
	}
	a := add("a")
	p, err := placement.New(placement.Config{Store: st, Dial: dial, WatchRefresh: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req := createReq("s1")
	record(t, st, req.ID, "", req.ExecutionID)
	if _, err := p.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	events, err := p.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-a.started
	a.Exit("s1", sandbox.KillOOM)
	if ev := <-events; ev.SandboxID != "s1" || ev.Type != nodeapi.EventExited {
		t.Fatalf("event %+v", ev)
	}
	if n, _ := st.GetNode(ctx, "a"); n.Allocated != (store.NodeResources{}) {
		t.Fatalf("an exited sandbox's node allocated %+v", n.Allocated)
	}
	b := add("b")
	record(t, st, "x", "b", "exec-x")
	<-b.started
	b.Emit(nodeapi.Event{Type: nodeapi.EventKilled, SandboxID: "x", ExecutionID: "exec-x", At: time.Now()})
	if ev := <-events; ev.SandboxID != "x" {
		t.Fatalf("event of the later node %+v", ev)
	}
}

// TestUnreachableNodeFailsFast: calls on a sandbox of an unreachable node
// are ErrUnavailable without asking it (its routes fail at once); a kill
// is still tried there.
func TestUnreachableNodeFailsFast(t *testing.T) {
	t.Parallel()
	st, f := storetest.SQLite(t), fleet{}
	ctx := context.Background()
	a := register(t, st, f, "a", 4, 4096)
	p := newPlacement(t, st, f)
	if err := st.CreateSandbox(ctx, &store.Sandbox{ID: "s1", TeamID: "t", TemplateID: "base", State: sandbox.StateStarting}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, createReq("s1")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MarkStaleNodes(ctx, time.Now().Add(time.Second), store.NodeUnreachable, store.NodeReady); err != nil {
		t.Fatal(err)
	}
	before := len(a.Calls())
	if _, err := p.Get(ctx, "s1"); !errdefs.IsUnavailable(err) {
		t.Fatalf("get on an unreachable node: %v", err)
	}
	if _, err := p.Pause(ctx, "s1", nodeapi.PauseRequest{}); !errdefs.IsUnavailable(err) {
		t.Fatalf("pause on an unreachable node: %v", err)
	}
	if got := a.Calls()[before:]; len(got) != 0 {
		t.Fatalf("the unreachable node was asked: %v", got)
	}
	if err := p.Kill(ctx, "s1", sandbox.KillRequest); err != nil {
		t.Fatalf("kill on an unreachable node that still answers: %v", err)
	}
	if onNode(t, a)["s1"] {
		t.Fatal("s1 still runs after the kill")
	}
}

// TestKillOrphan: a sandbox a node runs with no store row (an orphan a
// reconcile found through List, which merges every node's) is killed on
// the node that runs it; one no node runs is not found. The holder lookup
// alone answered not found for both, so orphans of warren api kept running.
func TestKillOrphan(t *testing.T) {
	t.Parallel()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, f := open(t), fleet{}
			ctx := context.Background()
			register(t, st, f, "a", 2, 4096)
			b := register(t, st, f, "b", 2, 4096)
			p := newPlacement(t, st, f)
			if _, err := b.Create(ctx, createReq("orphan")); err != nil {
				t.Fatal(err)
			}
			if err := p.Kill(ctx, "orphan", sandbox.KillOrphaned); err != nil {
				t.Fatalf("kill of an orphan on node b: %v", err)
			}
			if onNode(t, b)["orphan"] {
				t.Error("the orphan still runs on node b")
			}
			if err := p.Kill(ctx, "nowhere", sandbox.KillOrphaned); !errdefs.IsNotFound(err) {
				t.Errorf("kill of a sandbox on no node: %v, want not found", err)
			}
		})
	}
}
