//go:build e2e

// Package replicas runs Warren as on several machines, on one host: two
// `warren api` replicas over one Postgres and two `warren node` processes,
// each in a network namespace of its own (its "machine", joined to the
// host's by a veth pair), with real gVisor sandboxes; the client is the
// real E2B JS SDK (steps.mjs), pointed at one replica or the other.
package replicas

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// The two nodes' host objects, apart from every other test's.
var (
	isoA = e2eserve.NewIsolation("rpa", "100.106.0.0/16", "va")
	isoB = e2eserve.NewIsolation("rpb", "100.107.0.0/16", "vb")
)

// TestMain removes the nodes' cgroup roots at the end (their nftables
// tables go with their namespaces).
func TestMain(m *testing.M) { e2eserve.Main(m, isoA, isoB) }

const (
	apiKey     = "e2b_a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4"
	adminToken = "replicas-admin-token-0123456789abcdef"
	nodeToken  = "replicas-node-token-0123456789"
)

// startReplica starts the `warren api` replica o names (Name, Listen) on
// the database at dsn, with node liveness tuned short.
func startReplica(t *testing.T, dsn string, o e2eserve.APIOptions) *e2eserve.API {
	t.Helper()
	o.DSN, o.APIKey, o.AdminToken, o.NodeToken = dsn, apiKey, adminToken, nodeToken
	o.ExtraArgs = e2eserve.ShortLiveness
	return e2eserve.StartAPI(t, o)
}

// newNode is the `warren node` o names (ID, RPCListen, ProxyListen) in
// machine m's namespace: it advertises its link's address (the RPCListen
// host) and registers at apiURL.
func newNode(m *machine, iso e2eserve.Isolation, apiURL, dataDir string, o e2eserve.NodeOptions) *e2eserve.Node {
	o.APIURL, o.DataDir, o.Token, o.Isolation, o.Command = apiURL, dataDir, nodeToken, iso, m.command
	return e2eserve.NewNode(o)
}

// handoff SIGKILLs r1, the leader, while the nodes heartbeat through r2:
// r2 takes the lease once it expires, and for a full window of its term
// (--node-lost-after, 16 s, and a liveness check) kills nothing on the
// healthy nodes. (An outage of the whole control plane, where the new
// leader's window is what saves the nodes, is e2e multinode's.)
func handoff(t *testing.T, r1, r2 *e2eserve.API, nodes []*e2eserve.Node) {
	t.Helper()
	before := r1.Admin.Nodes(t)
	running := map[string][]string{}
	for _, n := range nodes {
		running[n.ID] = n.Running(t)
	}
	r1.P.Kill()
	killedAt := time.Now()
	e2eserve.WaitFor(t, "replica 2 leads after replica 1's SIGKILL", 2*time.Minute, func() (bool, any) { return r2.Leads(t), nil })
	leadsAt := time.Now()
	t.Logf("replica 2 leads %s after replica 1's SIGKILL (lease TTL 10 s)", leadsAt.Sub(killedAt).Round(100*time.Millisecond))
	for deadline := leadsAt.Add(19 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		m := r2.Admin.Nodes(t)
		for _, n := range nodes {
			if m[n.ID].Status != "ready" || m[n.ID].Sandboxes != before[n.ID].Sandboxes {
				t.Fatalf("node %s after the lease handoff: %+v, was %+v", n.ID, m[n.ID], before[n.ID])
			}
		}
	}
	for _, n := range nodes {
		if got := n.Running(t); !slices.Equal(sorted(got), sorted(running[n.ID])) {
			t.Fatalf("node %s runs %v after the lease handoff, ran %v", n.ID, got, running[n.ID])
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestReplicas: two API replicas over one database, two nodes on machines
// of their own. Creates through one replica spread over both nodes;
// commands, files and a port work through either replica's edge proxy and
// the node proxies; a sandbox killed or paused through replica 1 is gone
// or paused through replica 2 (its route follows the store); a resume
// stays on its node. The leader SIGKILLed, the other replica leads once
// the lease expires and kills nothing on the healthy nodes (handoff); it
// runs node liveness: a node SIGKILLed and kept down has its sandboxes
// killed with node_lost and gets no creates; back, its orphans are killed
// by the reconcile; drained, it gets no creates.
func TestReplicas(t *testing.T) {
	e2eserve.Prerequisites(t)
	_, err := exec.LookPath("nsenter")
	e2eserve.Require(t, err == nil, "nsenter is not installed")
	dsn := storetest.PostgresSchema(t)
	base := e2eserve.NodesDir(t, "replicas-e2e-")
	e2eserve.NoRunscLeftUnder(t, base)
	machines := []*machine{newMachine(t, "a", "rpla", "100.109.0.2"), newMachine(t, "b", "rplb", "100.109.0.3")}

	// Replica 1 first, so that it leads; the nodes register through
	// replica 2, which outlives it.
	r1 := startReplica(t, dsn, e2eserve.APIOptions{Name: "replica 1", Listen: "100.109.0.1:3960"})
	e2eserve.WaitFor(t, "replica 1 leads", 2*time.Minute, func() (bool, any) { return r1.Leads(t), nil })
	r2 := startReplica(t, dsn, e2eserve.APIOptions{Name: "replica 2", Listen: "100.109.0.1:3961"})
	if r2.Leads(t) {
		t.Fatal("replica 2 leads beside replica 1")
	}
	nodes := []*e2eserve.Node{
		newNode(machines[0], isoA, r2.URL, filepath.Join(base, "a"), e2eserve.NodeOptions{ID: "rp-a", RPCListen: "100.109.0.2:3962", ProxyListen: "100.109.0.2:3963"}),
		newNode(machines[1], isoB, r2.URL, filepath.Join(base, "b"), e2eserve.NodeOptions{ID: "rp-b", RPCListen: "100.109.0.3:3964", ProxyListen: "100.109.0.3:3965"}),
	}
	for _, n := range nodes {
		n.Run(t)
	}
	// Registered through replica 2, read through replica 1: the registry
	// is the database's.
	e2eserve.WaitFor(t, "both nodes ready", 5*time.Minute, func() (bool, any) {
		m := r1.Admin.Nodes(t)
		return m["rp-a"].Status == "ready" && m["rp-b"].Status == "ready", m
	})
	for _, n := range nodes {
		if got, want := r1.Admin.Nodes(t)[n.ID].ProxyAddress, n.ProxyListen; got != want {
			t.Errorf("node %s registered proxy address %q, want its link's %q", n.ID, got, want)
		}
	}

	// Creates through replica 1 spread over both nodes.
	ids := createVia(t, r1.URL, 4)
	onNode := map[string]*e2eserve.Node{}
	for _, n := range nodes {
		for _, id := range n.Running(t) {
			onNode[id] = n
		}
	}
	count := map[*e2eserve.Node][]string{}
	for _, id := range ids {
		if onNode[id] == nil {
			t.Fatalf("sandbox %s runs on no node; nodes %+v", id, r2.Admin.Nodes(t))
		}
		count[onNode[id]] = append(count[onNode[id]], id)
	}
	if len(count[nodes[0]]) == 0 || len(count[nodes[1]]) == 0 {
		t.Fatalf("4 creates over two nodes: %d on %s, %d on %s", len(count[nodes[0]]), nodes[0].ID, len(count[nodes[1]]), nodes[1].ID)
	}
	if m := r2.Admin.Nodes(t); m["rp-a"].Sandboxes != len(count[nodes[0]]) || m["rp-b"].Sandboxes != len(count[nodes[1]]) {
		t.Errorf("GET /admin/nodes of replica 2: %+v; the nodes run %d and %d", m, len(count[nodes[0]]), len(count[nodes[1]]))
	}

	// Commands, files and a port through replica 2's edge proxy and the
	// node proxies, then read back through replica 1's.
	steps(t, r2.URL, append([]string{"work"}, ids...)...)
	steps(t, r1.URL, append([]string{"check"}, ids...)...)

	// The node with more sandboxes (X) loses one, killed through replica
	// 1: replica 2, which routed to it a moment ago, finds it gone. The
	// other (Y) is the one SIGKILLed below.
	x, y := nodes[0], nodes[1]
	if len(count[y]) > len(count[x]) {
		x, y = y, x
	}
	killed := count[x][0]
	steps(t, r1.URL, "kill", killed)
	steps(t, r2.URL, "gone", killed)
	if _, err := x.Client().Get(context.Background(), killed); err == nil {
		t.Errorf("sandbox %s killed through replica 1 still on node %s", killed, x.ID)
	}

	// A sandbox paused through replica 1 reads as paused through replica
	// 2, and its resume through replica 2 stays on its node: its
	// processes (the port's server) and files with it.
	paused := count[y][0]
	steps(t, r1.URL, "pause", paused)
	steps(t, r2.URL, "paused", paused)
	steps(t, r2.URL, "resume", paused)
	if !slices.Contains(y.Running(t), paused) {
		t.Fatalf("resumed sandbox %s does not run on its node %s: %v", paused, y.ID, y.Running(t))
	}

	// The leader SIGKILLed: replica 2 takes the lease once it expires,
	// and kills nothing on the healthy nodes.
	handoff(t, r1, r2, nodes)

	// Node Y SIGKILLed and kept down: the new leader's liveness finds it
	// lost and kills its sandboxes with node_lost; creates avoid it.
	lost := y.Running(t)
	bootY := r2.Admin.Nodes(t)[y.ID].BootID
	y.P.Kill()
	e2eserve.WaitFor(t, "node "+y.ID+" lost", 3*time.Minute, func() (bool, any) {
		m := r2.Admin.Nodes(t)
		return m[y.ID].Status == "lost", m
	})
	steps(t, r2.URL, append([]string{"lost"}, lost...)...)
	extra := createVia(t, r2.URL, 1)
	if !slices.Contains(x.Running(t), extra[0]) {
		t.Errorf("sandbox %s created while %s is lost is not on %s", extra[0], y.ID, x.ID)
	}
	steps(t, r2.URL, "work", extra[0])

	// Node Y restarted on the same machine boot: ready again, and the
	// sandboxes the control plane killed while it was lost, which still
	// ran there, are killed on it (the orphans of the reconcile).
	y.Run(t)
	e2eserve.WaitFor(t, "node "+y.ID+" back", 5*time.Minute, func() (bool, any) {
		m := r2.Admin.Nodes(t)
		return m[y.ID].Status == "ready", m
	})
	if got := r2.Admin.Nodes(t)[y.ID]; got.BootID != bootY || got.Sandboxes != 0 {
		t.Errorf("node %s after its restart: %+v; boot ID was %q, the store places no sandbox there", y.ID, got, bootY)
	}
	e2eserve.WaitFor(t, "the orphans on "+y.ID+" killed", 3*time.Minute, func() (bool, any) {
		list, err := y.Client().List(context.Background())
		return err == nil && len(list) == 0, fmt.Sprint(list, err)
	})

	// Node Y drained through replica 2: creates go to X.
	r2.Admin.Call(t, "POST", "/admin/nodes/"+y.ID+"/drain")
	for _, id := range createVia(t, r2.URL, 2) {
		if !slices.Contains(x.Running(t), id) {
			t.Errorf("sandbox %s created while %s drains is not on %s", id, y.ID, x.ID)
		}
	}
	if m := r2.Admin.Nodes(t); m[y.ID].Status != "draining" || m[y.ID].Sandboxes != 0 {
		t.Errorf("node %s after creates while it drains: %+v", y.ID, m[y.ID])
	}
}
