package nodereg_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/placement"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

func backends() map[string]func(t *testing.T) *store.SQL {
	return map[string]func(t *testing.T) *store.SQL{
		"sqlite":   func(t *testing.T) *store.SQL { return storetest.SQLite(t) },
		"postgres": func(t *testing.T) *store.SQL { return storetest.Postgres(t) },
	}
}

func status(id, boot string) nodereg.Status {
	return nodereg.Status{ID: id, RPCAddress: "https://10.0.0.1:5009", ProxyAddress: "10.0.0.1:5010", BootID: boot, Version: "test",
		Capacity: store.NodeResources{VCPUs: 8, MemoryMB: 8192}, Allocated: store.NodeResources{VCPUs: 1, MemoryMB: 512}, Sandboxes: 1,
		Templates: []string{"build-base"}, Pools: []store.NodePool{{TemplateID: "base", BuildID: "build-base", Size: 2, Ready: 2}}}
}

// TestHeartbeatBody: a bad status is 400 and writes nothing.
func TestHeartbeatBody(t *testing.T) {
	t.Parallel()
	st := storetest.SQLite(t)
	creds := newCredentials(t, st, credentialKey)
	reg := nodereg.NewRegistry(st, nil, nil)
	on := httptest.NewServer(reg.Handler(creds))
	defer on.Close()
	ctx := context.Background()
	resp, err := http.Post(on.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no Authorization header: %d", resp.StatusCode)
	}
	tokBad, _ := issue(t, creds, "Bad-ID-ok")
	if _, err := (&nodereg.Client{APIURL: on.URL, Token: tokBad}).Heartbeat(ctx, status("Bad ID!", "b1")); err == nil {
		t.Fatal("a bad node ID was accepted")
	}
	tok, _ := issue(t, creds, "n1")
	cl := &nodereg.Client{APIURL: on.URL, Token: tok}
	bad := status("n1", "")
	if _, err := cl.Heartbeat(ctx, bad); !errdefs.IsInvalid(err) {
		t.Fatalf("no boot ID: %v", err)
	}
	r, err := cl.Heartbeat(ctx, status("n1", "b1"))
	if err != nil || r.Status != store.NodeReady {
		t.Fatalf("heartbeat with the token: %+v, %v", r, err)
	}
	n, err := st.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if n.RPCAddress != "https://10.0.0.1:5009" || n.Reported.VCPUs != 1 || !n.HoldsTemplate("build-base") || len(n.Pools) != 1 {
		t.Fatalf("registered node: %+v", n)
	}
}

// TestClientRun: the heartbeat loop registers the node and hands the
// API's replies (here: draining) to the node.
func TestClientRun(t *testing.T) {
	t.Parallel()
	st := storetest.SQLite(t)
	reg := nodereg.NewRegistry(st, nil, nil)
	creds := newCredentials(t, st, credentialKey)
	srv := httptest.NewServer(reg.Handler(creds))
	defer srv.Close()
	tok, _ := issue(t, creds, "n1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var replies []string
	beats := 0
	(&nodereg.Client{APIURL: srv.URL, Token: tok}).Run(ctx, time.Millisecond, func(context.Context) (nodereg.Status, error) {
		beats++
		return status("n1", "b1"), nil
	}, func(r *nodereg.Reply) {
		replies = append(replies, r.Status)
		if len(replies) == 1 {
			if err := st.SetNodeAdminStatus(ctx, "n1", store.NodeDraining); err != nil {
				t.Error(err)
			}
			return
		}
		cancel()
	})
	if len(replies) != 2 || replies[0] != store.NodeReady || replies[1] != store.NodeDraining {
		t.Fatalf("replies %v after %d beats", replies, beats)
	}
}

// cluster is a lifecycle over a placement over fake nodes, with the
// registry that watches their liveness.
type cluster struct {
	st    *store.SQL
	nodes map[string]*fakenode.Node
	lc    *lifecycle.Manager
	reg   *nodereg.Registry
}

func newCluster(t *testing.T, st *store.SQL, ids ...string) *cluster {
	t.Helper()
	c := &cluster{st: st, nodes: map[string]*fakenode.Node{}}
	c.reg = nodereg.NewRegistry(st, nil, nil)
	for _, id := range ids {
		c.nodes[id] = fakenode.New()
		if _, err := c.reg.Record(context.Background(), status(id, "boot-1")); err != nil {
			t.Fatal(err)
		}
	}
	p, err := placement.New(placement.Config{Store: st, Dial: func(n *store.Node) nodeapi.Service { return c.nodes[n.ID] }})
	if err != nil {
		t.Fatal(err)
	}
	c.lc, err = lifecycle.New(lifecycle.Config{Store: st, Node: p, AllNodes: true})
	if err != nil {
		t.Fatal(err)
	}
	c.reg.SetKiller(c.lc)
	return c
}

func (c *cluster) create(t *testing.T) *store.Sandbox {
	t.Helper()
	sb, err := c.lc.Create(context.Background(), lifecycle.CreateParams{TeamID: "t", Template: nodeapi.Template{ID: "base", BuildID: "build-base"},
		Timeout: time.Hour, Resources: sandbox.Resources{VCPUs: 1, MemoryMB: 512}})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func (c *cluster) wantState(t *testing.T, id string, state sandbox.State, reason sandbox.KillReason) {
	t.Helper()
	sb, err := c.st.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != state || sb.KillReason != reason {
		t.Fatalf("sandbox %s is %s (%s), want %s (%s)", id, sb.State, sb.KillReason, state, reason)
	}
	if state != sandbox.StateKilled {
		return
	}
	evs, err := c.st.ListEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, e := range evs {
		if e.Type == store.EventKilled {
			killed++
			if e.Reason != reason || e.Data.KillReason != string(reason) {
				t.Fatalf("killed event of %s: %+v", id, e)
			}
		}
	}
	if killed != 1 {
		t.Fatalf("sandbox %s has %d killed events, want 1", id, killed)
	}
}

// TestLostNode: a node silent for UnreachableAfter takes no creates; after
// LostAfter its running sandboxes are killed with node_lost (one event
// each) while its paused ones wait; after PausedLostAfter those go too.
// A node that heartbeats takes the creates meanwhile.
func TestLostNode(t *testing.T) {
	t.Parallel()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := newCluster(t, open(t), "a")
			running, paused := c.create(t), c.create(t)
			if err := c.lc.Pause(ctx, "t", paused.ID, false); err != nil {
				t.Fatal(err)
			}
			cfg := nodereg.LivenessConfig{UnreachableAfter: 15 * time.Second, LostAfter: time.Minute, PausedLostAfter: time.Hour}
			now := time.Now()
			// Node b registers later and keeps heartbeating.
			c.nodes["b"] = fakenode.New()
			beat := func() {
				if _, err := c.reg.Record(ctx, status("b", "boot-1")); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.reg.CheckLiveness(ctx, now.Add(16*time.Second), time.Time{}, cfg); err != nil {
				t.Fatal(err)
			}
			if n, _ := c.st.GetNode(ctx, "a"); n.Status() != store.NodeUnreachable {
				t.Fatalf("a after 16 s: %s", n.Status())
			}
			c.wantState(t, running.ID, sandbox.StateRunning, "")
			if _, err := c.lc.Create(ctx, lifecycle.CreateParams{TeamID: "t", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour,
				Resources: sandbox.Resources{VCPUs: 1, MemoryMB: 512}}); !errdefs.IsExhausted(err) {
				t.Fatalf("create with the only node unreachable: %v", err)
			}
			beat()
			onB := c.create(t)
			if sb, _ := c.st.GetSandbox(ctx, onB.ID); sb.Spec.NodeID != "b" {
				t.Fatalf("create went to %q, want the live node b", sb.Spec.NodeID)
			}
			// The checks below are judged from a's last heartbeat; b's is
			// as old by then (the store's clock is real), so b goes too.
			aBeat, _ := c.st.GetNode(ctx, "a")
			if err := c.reg.CheckLiveness(ctx, aBeat.LastHeartbeat.Add(61*time.Second), time.Time{}, cfg); err != nil {
				t.Fatal(err)
			}
			if n, _ := c.st.GetNode(ctx, "a"); n.Status() != store.NodeLost || n.Allocated != (store.NodeResources{}) {
				t.Fatalf("a after 61 s: %s, allocated %+v", n.Status(), n.Allocated)
			}
			c.wantState(t, running.ID, sandbox.StateKilled, sandbox.KillNodeLost)
			c.wantState(t, paused.ID, sandbox.StatePaused, "")
			if err := c.reg.CheckLiveness(ctx, aBeat.LastHeartbeat.Add(61*time.Second), time.Time{}, cfg); err != nil {
				t.Fatal(err)
			}
			c.wantState(t, running.ID, sandbox.StateKilled, sandbox.KillNodeLost) // still one event
			if err := c.reg.CheckLiveness(ctx, aBeat.LastHeartbeat.Add(61*time.Minute), time.Time{}, cfg); err != nil {
				t.Fatal(err)
			}
			c.wantState(t, paused.ID, sandbox.StateKilled, sandbox.KillNodeLost)
			if calls := c.nodes["a"].Calls(); strings.Contains(strings.Join(calls, ","), "kill") {
				t.Fatalf("the lost node was asked to kill: %v", calls)
			}
		})
	}
}

// TestRestartedNode: a heartbeat with a new boot ID means the node's
// running sandboxes did not survive: they are killed with node_lost and
// the node's reservations dropped; a paused one is left to its resume.
func TestRestartedNode(t *testing.T) {
	t.Parallel()
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := newCluster(t, open(t), "a")
			running, paused := c.create(t), c.create(t)
			if err := c.lc.Pause(ctx, "t", paused.ID, false); err != nil {
				t.Fatal(err)
			}
			if _, err := c.reg.Record(ctx, status("a", "boot-1")); err != nil {
				t.Fatal(err)
			}
			c.wantState(t, running.ID, sandbox.StateRunning, "")
			// The node restarted: its fake forgets what ran.
			if err := c.nodes["a"].Kill(ctx, running.ID, sandbox.KillRequest); err != nil {
				t.Fatal(err)
			}
			if _, err := c.reg.Record(ctx, status("a", "boot-2")); err != nil {
				t.Fatal(err)
			}
			c.wantState(t, running.ID, sandbox.StateKilled, sandbox.KillNodeLost)
			c.wantState(t, paused.ID, sandbox.StatePaused, "")
			if n, _ := c.st.GetNode(ctx, "a"); n.Allocated != (store.NodeResources{}) || n.BootID != "boot-2" {
				t.Fatalf("restarted node: %+v", n)
			}
		})
	}
}

// TestAdminNodes: GET /admin/nodes lists each node's id, addresses,
// status, capacity, allocation, sandboxes and last heartbeat; drain,
// cordon and uncordon change the status; an unknown node is 404.
func TestAdminNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t, storetest.SQLite(t), "a", "b")
	c.create(t)
	mux := http.NewServeMux()
	c.reg.AdminRoutes(func(p string, h http.Handler) { mux.Handle(p, h) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	call := func(method, path string, want int) []byte {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body json.RawMessage
		json.NewDecoder(resp.Body).Decode(&body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, body, want)
		}
		return body
	}
	var list []nodereg.NodeInfo
	if err := json.Unmarshal(call("GET", "/admin/nodes", 200), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("%d nodes listed", len(list))
	}
	total := 0
	for _, n := range list {
		if n.Status != store.NodeReady || n.RPCAddress == "" || n.Capacity.VCPUs != 8 || n.LastHeartbeat.IsZero() {
			t.Fatalf("listed node: %+v", n)
		}
		total += n.Sandboxes
		if n.Sandboxes == 1 && n.Allocated != (store.NodeResources{VCPUs: 1, MemoryMB: 512}) {
			t.Fatalf("node with the sandbox: allocated %+v", n.Allocated)
		}
	}
	if total != 1 {
		t.Fatalf("sandboxes over the nodes: %d, want 1", total)
	}
	for action, want := range map[string]string{"drain": store.NodeDraining, "cordon": store.NodeCordoned, "uncordon": store.NodeReady} {
		var n nodereg.NodeInfo
		if err := json.Unmarshal(call("POST", "/admin/nodes/a/"+action, 200), &n); err != nil || n.Status != want {
			t.Fatalf("%s: %+v, %v", action, n, err)
		}
	}
	// An unknown node is 404 with the API's error body: a message chosen
	// for it, not the store's error text.
	for _, path := range []string{"POST /admin/nodes/nope/drain", "GET /admin/nodes/nope"} {
		method, p, _ := strings.Cut(path, " ")
		var eb struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(call(method, p, 404), &eb); err != nil || eb.Code != 404 || eb.Message != `node "nope" not found` {
			t.Fatalf("%s: %+v %v", path, eb, err)
		}
	}
}

// TestLostNodeTwoReplicas: two API replicas over one Postgres database
// check liveness at once, twice: each of the lost node's running
// sandboxes is killed with exactly one killed event.
func TestLostNodeTwoReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := storetest.PostgresSchema(t)
	a := newCluster(t, storetest.OpenPostgres(t, dsn), "n")
	b := newCluster(t, storetest.OpenPostgres(t, dsn))
	b.nodes["n"] = a.nodes["n"]
	var ids []string
	for range 6 {
		ids = append(ids, a.create(t).ID)
	}
	n, err := a.st.GetNode(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	at := n.LastHeartbeat.Add(10 * time.Minute)
	errs := make(chan error, 4)
	for _, c := range []*cluster{a, b, a, b} {
		go func() { errs <- c.reg.CheckLiveness(ctx, at, time.Time{}, nodereg.LivenessConfig{}) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		a.wantState(t, id, sandbox.StateKilled, sandbox.KillNodeLost)
	}
}

// TestCollect: a node's status counts its sandboxes and the resources of
// those not paused; the host capacity is read from the host.
func TestCollect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fn := fakenode.New()
	for _, id := range []string{"s1", "s2"} {
		if _, err := fn.Create(ctx, nodeapi.CreateRequest{ID: id, Resources: sandbox.Resources{VCPUs: 2, MemoryMB: 1024}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fn.Pause(ctx, "s2", nodeapi.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	capacity, err := nodereg.HostCapacity()
	if err != nil || capacity.VCPUs < 1 || capacity.MemoryMB < 1 {
		t.Fatalf("host capacity %+v, %v", capacity, err)
	}
	st, err := nodereg.Collect(ctx, fn, nodereg.Status{ID: "n", BootID: nodereg.NewBootID(), Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	if st.Sandboxes != 2 || st.Allocated != (store.NodeResources{VCPUs: 2, MemoryMB: 1024}) || st.Capacity != capacity || st.BootID == "" {
		t.Fatalf("collected %+v", st)
	}
	st, err = nodereg.Collect(ctx, holder{fn}, nodereg.Status{ID: "n", Templates: []string{"build-b"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(st.Templates, ",") != "build-a,build-b" {
		t.Fatalf("templates held %v, want build-a and build-b", st.Templates)
	}
}

// holder is a node that says its sandboxes use build-a.
type holder struct{ *fakenode.Node }

func (holder) TemplatesInUse(context.Context) ([]nodeapi.TemplateUse, error) {
	return []nodeapi.TemplateUse{{TemplateID: "a", BuildID: "build-a", SandboxID: "s1"}, {TemplateID: "a", BuildID: "build-a"}}, nil
}
