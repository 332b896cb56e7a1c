//go:build e2e

// Package replicas runs Warren as on several machines, on one host: two
// `warren api` replicas over one Postgres and two `warren node` processes,
// each in a network namespace of its own (its "machine", joined to the
// host's by a veth pair), with real gVisor sandboxes; the client is the
// real E2B JS SDK (steps.mjs), pointed at one replica or the other.
package replicas

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// The two nodes' host objects, apart from every other test's.
var (
	isoA = e2eserve.NewIsolation("rpa", "100.106.0.0/16", "va")
	isoB = e2eserve.NewIsolation("rpb", "100.107.0.0/16", "vb")
)

// TestMain removes the nodes' cgroup roots at the end (their nftables
// tables go with their namespaces).
func TestMain(m *testing.M) {
	code := m.Run()
	isoA.Cleanup()
	isoB.Cleanup()
	os.Exit(code)
}

const (
	apiKey     = "e2b_a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4"
	adminToken = "replicas-admin-token"
	nodeToken  = "replicas-node-token-0123456789"
)

// replica is one `warren api`.
type replica struct {
	name, url string
	p         *proc
}

// replicaOptions are what differs between the replicas.
type replicaOptions struct {
	Name, Listen string
}

func startReplica(t *testing.T, dsn string, o replicaOptions) *replica {
	t.Helper()
	cmd := exec.Command(os.Getenv("WARREN_WARREN"), "api", "--listen", o.Listen, "--database-url", dsn,
		"--api-key", apiKey, "--admin-token", adminToken, "--metrics-listen", "",
		"--node-unreachable-after", "11s", "--node-lost-after", "16s", "--node-paused-lost-after", "16s")
	p := start(t, o.Name, cmd, "WARREN_NODE_TOKEN="+nodeToken)
	return &replica{name: o.Name, url: p.exports(t, "E2B_API_URL")["E2B_API_URL"], p: p}
}

// leads reports whether the replica holds the leader lease (api_leader 1).
func (r *replica) leads(t *testing.T) bool {
	return strings.Contains(string(call(t, "GET", r.url+"/metrics")), "\napi_leader 1\n")
}

// nodes is GET /admin/nodes of the replica, by node ID.
func (r *replica) nodes(t *testing.T) map[string]nodeInfo {
	t.Helper()
	var list []nodeInfo
	if err := json.Unmarshal(call(t, "GET", r.url+"/admin/nodes"), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]nodeInfo{}
	for _, n := range list {
		out[n.ID] = n
	}
	return out
}

// node is one `warren node` in its machine's namespace.
type node struct {
	id, rpc, proxy, apiURL, dataDir string
	m                               *machine
	iso                             e2eserve.Isolation
	p                               *proc
}

// nodeOptions are what differs between the nodes.
type nodeOptions struct {
	ID, RPCListen, ProxyListen string
}

func newNode(m *machine, iso e2eserve.Isolation, apiURL, dataDir string, o nodeOptions) *node {
	return &node{id: o.ID, rpc: o.RPCListen, proxy: o.ProxyListen, apiURL: apiURL, dataDir: dataDir, m: m, iso: iso}
}

// run starts the node in its namespace, advertising its link's address
// (the --rpc-listen host) and registering at apiURL.
func (n *node) run(t *testing.T) {
	t.Helper()
	cmd := n.m.command(os.Getenv("WARREN_WARREN"), "node", "--node-id", n.id, "--rpc-listen", n.rpc,
		"--proxy-listen", n.proxy, "--api-url", n.apiURL, "--data-dir", n.dataDir,
		"--runsc", os.Getenv("WARREN_RUNSC"), "--envd", os.Getenv("WARREN_ENVD"),
		"--base-rootfs", os.Getenv("WARREN_TEST_ROOTFS_TAR"), "--cgroup-root", n.iso.CgroupRoot,
		"--nft-table", n.iso.Table, "--net-cidr", n.iso.CIDR, "--veth-prefix", n.iso.VethPrefix)
	n.p = start(t, "warren node "+n.id, cmd, "WARREN_NODE_TOKEN="+nodeToken)
}

// client is the node's RPC, as the API calls it.
func (n *node) client() *nodeclient.Client {
	return nodeclient.New("http://"+n.rpc, nodeclient.Options{Token: nodeToken})
}

// running lists the IDs of the sandboxes the node runs (its own word).
func (n *node) running(t *testing.T) []string {
	t.Helper()
	list, err := n.client().List(context.Background())
	if err != nil {
		t.Fatalf("list on node %s: %v", n.id, err)
	}
	var ids []string
	for _, s := range list {
		if s.State == "running" {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// TestReplicas: two API replicas over one database, two nodes on machines
// of their own. Creates through one replica spread over both nodes;
// commands, files and a port work through either replica's edge proxy and
// the node proxies; a sandbox killed or paused through replica 1 is gone
// or paused through replica 2 (its route follows the store); a resume
// stays on its node. The leader SIGKILLed, the other replica leads once
// the lease expires and runs node liveness: a node SIGKILLed and kept
// down has its sandboxes killed with node_lost and gets no creates; back,
// its orphans are killed by the reconcile; drained, it gets no creates.
func TestReplicas(t *testing.T) {
	e2eserve.Prerequisites(t)
	_, err := exec.LookPath("nsenter")
	e2eserve.Require(t, err == nil, "nsenter is not installed")
	dsn := storetest.PostgresSchema(t)
	if err := os.MkdirAll("../../var", 0o755); err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("../../var", "replicas-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	base, _ = filepath.Abs(base)
	t.Cleanup(func() { os.RemoveAll(base) })
	t.Cleanup(func() { // last but the removal: nothing of the nodes' runs on
		if left := runscUnder(base); len(left) > 0 {
			t.Errorf("runsc processes left under the nodes' data dirs: %v", left)
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	t.Cleanup(func() { e2eserve.UnmountUnder(t, base) })
	machines := []*machine{newMachine(t, "a", "rpla", "100.109.0.2"), newMachine(t, "b", "rplb", "100.109.0.3")}

	// Replica 1 first, so that it leads; the nodes register through
	// replica 2, which outlives it.
	r1 := startReplica(t, dsn, replicaOptions{Name: "replica 1", Listen: "100.109.0.1:3960"})
	waitFor(t, "replica 1 leads", 2*time.Minute, func() (bool, any) { return r1.leads(t), nil })
	r2 := startReplica(t, dsn, replicaOptions{Name: "replica 2", Listen: "100.109.0.1:3961"})
	if r2.leads(t) {
		t.Fatal("replica 2 leads beside replica 1")
	}
	nodes := []*node{
		newNode(machines[0], isoA, r2.url, filepath.Join(base, "a"), nodeOptions{ID: "rp-a", RPCListen: "100.109.0.2:3962", ProxyListen: "100.109.0.2:3963"}),
		newNode(machines[1], isoB, r2.url, filepath.Join(base, "b"), nodeOptions{ID: "rp-b", RPCListen: "100.109.0.3:3964", ProxyListen: "100.109.0.3:3965"}),
	}
	for _, n := range nodes {
		n.run(t)
		t.Cleanup(func() { // before the node stops: kill what is left on it
			if list, err := n.client().List(context.Background()); err == nil {
				for _, sb := range list {
					n.client().Kill(context.Background(), sb.ID, "request") //nolint:errcheck
				}
			}
		})
	}
	// Registered through replica 2, read through replica 1: the registry
	// is the database's.
	waitFor(t, "both nodes ready", 5*time.Minute, func() (bool, any) {
		m := r1.nodes(t)
		return m["rp-a"].Status == "ready" && m["rp-b"].Status == "ready", m
	})
	for _, n := range nodes {
		if got, want := r1.nodes(t)[n.id].ProxyAddress, n.proxy; got != want {
			t.Errorf("node %s registered proxy address %q, want its link's %q", n.id, got, want)
		}
	}

	// Creates through replica 1 spread over both nodes.
	ids := createVia(t, r1.url, 4)
	onNode := map[string]*node{}
	for _, n := range nodes {
		for _, id := range n.running(t) {
			onNode[id] = n
		}
	}
	count := map[*node][]string{}
	for _, id := range ids {
		if onNode[id] == nil {
			t.Fatalf("sandbox %s runs on no node; nodes %+v", id, r2.nodes(t))
		}
		count[onNode[id]] = append(count[onNode[id]], id)
	}
	if len(count[nodes[0]]) == 0 || len(count[nodes[1]]) == 0 {
		t.Fatalf("4 creates over two nodes: %d on %s, %d on %s", len(count[nodes[0]]), nodes[0].id, len(count[nodes[1]]), nodes[1].id)
	}
	if m := r2.nodes(t); m["rp-a"].Sandboxes != len(count[nodes[0]]) || m["rp-b"].Sandboxes != len(count[nodes[1]]) {
		t.Errorf("GET /admin/nodes of replica 2: %+v; the nodes run %d and %d", m, len(count[nodes[0]]), len(count[nodes[1]]))
	}

	// Commands, files and a port through replica 2's edge proxy and the
	// node proxies, then read back through replica 1's.
	steps(t, r2.url, append([]string{"work"}, ids...)...)
	steps(t, r1.url, append([]string{"check"}, ids...)...)

	// The node with more sandboxes (X) loses one, killed through replica
	// 1: replica 2, which routed to it a moment ago, finds it gone. The
	// other (Y) is the one SIGKILLed below.
	x, y := nodes[0], nodes[1]
	if len(count[y]) > len(count[x]) {
		x, y = y, x
	}
	killed := count[x][0]
	steps(t, r1.url, "kill", killed)
	steps(t, r2.url, "gone", killed)
	if _, err := x.client().Get(context.Background(), killed); err == nil {
		t.Errorf("sandbox %s killed through replica 1 still on node %s", killed, x.id)
	}

	// A sandbox paused through replica 1 reads as paused through replica
	// 2, and its resume through replica 2 stays on its node: its
	// processes (the port's server) and files with it.
	paused := count[y][0]
	steps(t, r1.url, "pause", paused)
	steps(t, r2.url, "paused", paused)
	steps(t, r2.url, "resume", paused)
	if !slices.Contains(y.running(t), paused) {
		t.Fatalf("resumed sandbox %s does not run on its node %s: %v", paused, y.id, y.running(t))
	}

	// The leader SIGKILLed: replica 2 takes the lease once it expires.
	r1.p.kill()
	killedAt := time.Now()
	waitFor(t, "replica 2 leads after replica 1's SIGKILL", 2*time.Minute, func() (bool, any) { return r2.leads(t), nil })
	t.Logf("replica 2 leads %s after replica 1's SIGKILL (lease TTL 10 s)", time.Since(killedAt).Round(100*time.Millisecond))

	// Node Y SIGKILLed and kept down: the new leader's liveness finds it
	// lost and kills its sandboxes with node_lost; creates avoid it.
	lost := y.running(t)
	bootY := r2.nodes(t)[y.id].BootID
	y.p.kill()
	waitFor(t, "node "+y.id+" lost", 3*time.Minute, func() (bool, any) {
		m := r2.nodes(t)
		return m[y.id].Status == "lost", m
	})
	steps(t, r2.url, append([]string{"lost"}, lost...)...)
	extra := createVia(t, r2.url, 1)
	if !slices.Contains(x.running(t), extra[0]) {
		t.Errorf("sandbox %s created while %s is lost is not on %s", extra[0], y.id, x.id)
	}
	steps(t, r2.url, "work", extra[0])

	// Node Y restarted on the same machine boot: ready again, and the
	// sandboxes the control plane killed while it was lost, which still
	// ran there, are killed on it (the orphans of the reconcile).
	y.run(t)
	waitFor(t, "node "+y.id+" back", 5*time.Minute, func() (bool, any) {
		m := r2.nodes(t)
		return m[y.id].Status == "ready", m
	})
	if got := r2.nodes(t)[y.id]; got.BootID != bootY || got.Sandboxes != 0 {
		t.Errorf("node %s after its restart: %+v; boot ID was %q, the store places no sandbox there", y.id, got, bootY)
	}
	waitFor(t, "the orphans on "+y.id+" killed", 3*time.Minute, func() (bool, any) {
		list, err := y.client().List(context.Background())
		return err == nil && len(list) == 0, fmt.Sprint(list, err)
	})

	// Node Y drained through replica 2: creates go to X.
	call(t, "POST", r2.url+"/admin/nodes/"+y.id+"/drain")
	for _, id := range createVia(t, r2.url, 2) {
		if !slices.Contains(x.running(t), id) {
			t.Errorf("sandbox %s created while %s drains is not on %s", id, y.id, x.id)
		}
	}
	if m := r2.nodes(t); m[y.id].Status != "draining" || m[y.id].Sandboxes != 0 {
		t.Errorf("node %s after creates while it drains: %+v", y.id, m[y.id])
	}
}
