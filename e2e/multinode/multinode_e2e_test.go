//go:build e2e

// Package multinode runs Warren across machines on one host: one
// `warren api` on Postgres and two `warren node` processes with real
// gVisor sandboxes, each node with host objects of its own, reached only
// through the node RPC and the node proxies; the client is the Go SDK
// (pkg/e2b) from the API's side.
package multinode

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/e2b"
)

// The two nodes' host objects, apart from every other test's.
var (
	isoA = e2eserve.NewIsolation("mna", "100.98.0.0/16", "na")
	isoB = e2eserve.NewIsolation("mnb", "100.99.0.0/16", "nb")
)

// TestMain removes the nodes' cgroup roots and nftables tables at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, isoA, isoB, isoH, isoI) }

const (
	apiKey     = "e2b_a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3"
	adminToken = "multinode-admin-token-0123456789abcdef"
	nodeToken  = "multinode-node-token-0123456789"
	apiAddr    = "127.0.0.1:3890"
)

// backstopGrace is the nodes' TTL backstop grace (--backstop-grace),
// short so that the outage below outlasts a sandbox's end plus it.
const backstopGrace = 4 * time.Second

func apiOptions(dsn string) e2eserve.APIOptions {
	return e2eserve.APIOptions{Name: "warren api", Listen: apiAddr, DSN: dsn,
		APIKey: apiKey, AdminToken: adminToken, NodeToken: nodeToken,
		ExtraArgs: e2eserve.ShortLiveness}
}

// TestTwoNodes: creates spread over two nodes and work through their node
// proxies (commands, files, a pause and resume on the same node); the API
// down for longer than --node-lost-after kills nothing on the healthy
// nodes, and the backstop's kill made meanwhile is recorded as
// ttl_backstop at its time (outage); a node killed and kept down loses its
// sandboxes (node_lost) and gets no new ones; restarted, it is reconciled
// (nothing of its old sandboxes runs on it); a drained node gets no
// creates.
func TestTwoNodes(t *testing.T) {
	e2eserve.RunscPrerequisites(t)
	dsn := storetest.PostgresSchema(t)
	base := e2eserve.NodesDir(t, "multinode-e2e-")
	e2eserve.NoRunscLeftUnder(t, base)

	api := e2eserve.StartAPI(t, apiOptions(dsn))
	adm := api.Admin
	cfg := e2b.Config{APIKey: apiKey, APIURL: api.Env["E2B_API_URL"], SandboxURL: api.Env["E2B_SANDBOX_URL"], Domain: "localhost:3890"}

	newNode := func(id, rpc, proxy, dir string, iso e2eserve.Isolation) *e2eserve.Node {
		return e2eserve.NewNode(e2eserve.NodeOptions{ID: id, RPCListen: rpc, ProxyListen: proxy,
			APIURL: "http://" + apiAddr, DataDir: filepath.Join(base, dir), Token: nodeToken, Isolation: iso,
			ExtraArgs: []string{"--backstop-grace", backstopGrace.String()}})
	}
	a := newNode("mn-a", "127.0.0.1:3891", "127.0.0.1:3892", "a", isoA)
	b := newNode("mn-b", "127.0.0.1:3893", "127.0.0.1:3894", "b", isoB)
	for _, n := range []*e2eserve.Node{a, b} {
		n.Run(t)
	}
	adm.WaitNodes(t, "both nodes ready", 3*time.Minute, func(m map[string]e2eserve.NodeInfo) bool {
		return m["mn-a"].Status == "ready" && m["mn-b"].Status == "ready"
	})

	ctx := context.Background()
	create := func() *e2b.Sandbox {
		t.Helper()
		sb, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Timeout: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	var sbs []*e2b.Sandbox
	for range 4 {
		sbs = append(sbs, create())
	}
	spread := adm.Nodes(t)
	if spread["mn-a"].Sandboxes == 0 || spread["mn-b"].Sandboxes == 0 || spread["mn-a"].Sandboxes+spread["mn-b"].Sandboxes != 4 {
		t.Fatalf("4 creates over two nodes: %+v", spread)
	}
	onNode := map[string]string{} // sandbox ID → node ID
	for _, n := range []*e2eserve.Node{a, b} {
		list, err := n.Client().List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			onNode[s.ID] = n.ID
		}
	}
	for _, sb := range sbs {
		r, err := sb.Commands.Run(ctx, "echo $((6*7)) from $(hostname)", e2b.RunOptions{})
		if err != nil || !strings.HasPrefix(r.Stdout, "42 from") {
			t.Fatalf("command in %s (node %s): %+v %v", sb.ID, onNode[sb.ID], r, err)
		}
		if _, err := sb.Files.Write(ctx, "/home/user/n.txt", []byte(sb.ID), e2b.FileOptions{}); err != nil {
			t.Fatalf("write in %s: %v", sb.ID, err)
		}
	}

	// A pause and resume stay on the node that holds the snapshot.
	p := sbs[0]
	if ok, err := p.Pause(ctx); !ok || err != nil {
		t.Fatalf("pause: %v %v", ok, err)
	}
	again, err := e2b.Connect(ctx, p.ID, e2b.ConnectOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := again.Files.Read(ctx, "/home/user/n.txt", e2b.FileOptions{}); err != nil || string(data) != p.ID {
		t.Fatalf("read after resume: %q %v", data, err)
	}
	holder := a
	if onNode[p.ID] == b.ID {
		holder = b
	}
	if s, err := holder.Client().Get(ctx, p.ID); err != nil || string(s.State) != "running" {
		t.Fatalf("resumed sandbox on %s: %+v %v", holder.ID, s, err)
	}

	outage(t, dsn, api, adm, cfg, sbs, []*e2eserve.Node{a, b})

	// Node B killed and kept down: its sandboxes become node_lost, new
	// creates avoid it.
	bootB := spread["mn-b"].BootID
	b.P.Kill()
	adm.WaitNodes(t, "node B lost", time.Minute, func(m map[string]e2eserve.NodeInfo) bool { return m["mn-b"].Status == "lost" })
	// The node reads as lost first; its sandboxes are then killed with
	// node_lost by the same liveness check.
	for _, sb := range sbs {
		if onNode[sb.ID] != b.ID {
			continue
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			info, err := sb.Info(ctx)
			if err != nil || string(info.State) != "running" {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("sandbox %s of the lost node still running: %+v", sb.ID, info)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	before := adm.Nodes(t)["mn-a"].Sandboxes
	extra := create()
	if got := adm.Nodes(t)["mn-a"].Sandboxes; got != before+1 {
		t.Errorf("create while B is lost: node A has %d sandboxes, want %d", got, before+1)
	}
	if r, err := extra.Commands.Run(ctx, "true", e2b.RunOptions{}); err != nil {
		t.Errorf("command in a sandbox created while B is lost: %+v %v", r, err)
	}

	// Restarted on the same machine boot (its boot ID is the host's), B is
	// ready again, and what ran on it before, killed by the control plane
	// while B was lost, is killed there too: the store is the truth.
	b.Run(t)
	back := adm.WaitNodes(t, "node B back", 3*time.Minute, func(m map[string]e2eserve.NodeInfo) bool {
		return m["mn-b"].Status == "ready"
	})
	if back["mn-b"].BootID != bootB {
		t.Errorf("boot ID after a restart on the same machine boot: %q, was %q", back["mn-b"].BootID, bootB)
	}
	if back["mn-b"].Sandboxes != 0 {
		t.Errorf("sandboxes the store places on the restarted node: %d, want 0", back["mn-b"].Sandboxes)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := b.Client().List(ctx)
		if err == nil && len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node still runs its old sandboxes: %+v %v", list, err)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Drained, B gets no creates.
	adm.Call(t, "POST", "/admin/nodes/mn-b/drain")
	before = adm.Nodes(t)["mn-a"].Sandboxes
	for range 2 {
		create()
	}
	if m := adm.Nodes(t); m["mn-a"].Sandboxes != before+2 || m["mn-b"].Sandboxes != 0 || m["mn-b"].Status != "draining" {
		t.Errorf("creates while B drains: %+v", m)
	}
}

// outage SIGKILLs the API (the only replica) for longer than
// --node-lost-after (16 s) while both nodes stay healthy, with one more
// sandbox whose end time passes meanwhile. Its node's TTL backstop stops
// it at its end plus the grace, and counts the kill on its own metrics.
// The API started again gives every node a full window: nothing is
// killed, nothing is unreachable or lost, and the backstop's kill is
// recorded as the node made it (ttl_backstop, at the kill's time, before
// the API was back). The nodes are heard again within seconds.
func outage(t *testing.T, dsn string, api *e2eserve.API, adm e2eserve.Admin, cfg e2b.Config, sbs []*e2b.Sandbox, nodes []*e2eserve.Node) {
	t.Helper()
	ctx := context.Background()
	short, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Timeout: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	info, err := short.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var holder *e2eserve.Node
	for _, n := range nodes {
		if slices.Contains(n.Running(t), short.ID) {
			holder = n
		}
	}
	if holder == nil {
		t.Fatalf("sandbox %s runs on no node", short.ID)
	}
	before := holder.KillCount(t, "ttl_backstop")
	api.P.Kill()
	downAt := time.Now()
	if time.Until(info.EndAt) < time.Second {
		t.Logf("the API went down %s before the short sandbox's end", time.Until(info.EndAt))
	}

	// While the API is down: the backstop stops the expired sandbox on
	// its node, and the node counts it.
	e2eserve.WaitFor(t, "the node's backstop stops the expired sandbox", time.Minute, func() (bool, any) {
		running := holder.Running(t)
		return !slices.Contains(running, short.ID), running
	})
	goneBy := time.Now()
	e2eserve.WaitFor(t, "the node counts the backstop's kill made while the API is down", 30*time.Second, func() (bool, any) {
		got := holder.KillCount(t, "ttl_backstop")
		return got == before+1, got
	})
	// The outage outlasts --node-lost-after (16 s) by a margin.
	time.Sleep(time.Until(downAt.Add(20 * time.Second)))
	live := map[string]bool{}
	for _, n := range nodes {
		for _, id := range n.Running(t) {
			live[id] = true
		}
	}
	for _, sb := range sbs {
		if !live[sb.ID] {
			t.Fatalf("sandbox %s stopped on its node during the outage", sb.ID)
		}
	}

	e2eserve.StartAPI(t, apiOptions(dsn))
	backAt := time.Now()
	adm.WaitNodes(t, "both nodes heard again", 30*time.Second, func(m map[string]e2eserve.NodeInfo) bool {
		return m["mn-a"].Status == "ready" && m["mn-b"].Status == "ready"
	})
	t.Logf("nodes ready %s after the API came back", time.Since(backAt).Round(100*time.Millisecond))
	// A full --node-lost-after (16 s) and a liveness check (every 2 s)
	// into the API's term, nothing was killed.
	for deadline := backAt.Add(19 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		for id, n := range adm.Nodes(t) {
			if n.Status != "ready" {
				t.Fatalf("node %s %s after the outage, its process healthy", id, n.Status)
			}
		}
	}
	for _, sb := range sbs {
		got, err := sb.Info(ctx)
		if err != nil || got.State != "running" {
			t.Fatalf("sandbox %s after the outage: %+v %v, want running", sb.ID, got, err)
		}
	}
	for _, n := range nodes {
		for _, id := range n.Running(t) {
			delete(live, id)
		}
	}
	if len(live) != 0 {
		t.Fatalf("sandboxes stopped on their nodes after the outage: %v", live)
	}

	// The backstop's kill as the node made it.
	var evs []struct {
		Type      string    `json:"type"`
		Timestamp time.Time `json:"timestamp"`
		EventData struct {
			KillReason string `json:"kill_reason"`
		} `json:"eventData"`
	}
	e2eserve.WaitFor(t, "the backstop's kill recorded", 30*time.Second, func() (bool, any) {
		code, body := e2eserve.Call(t, "GET", cfg.APIURL+"/events/sandboxes/"+short.ID+"?type=killed", map[string]string{"X-API-Key": apiKey})
		evs = nil
		if code != 200 || json.Unmarshal(body, &evs) != nil {
			return false, string(body)
		}
		return len(evs) > 0, string(body)
	})
	if len(evs) != 1 || evs[0].EventData.KillReason != "ttl_backstop" {
		t.Fatalf("killed events of the sandbox the backstop stopped: %+v, want one ttl_backstop", evs)
	}
	at, earliest := evs[0].Timestamp, info.EndAt.Add(backstopGrace)
	if at.Before(earliest.Add(-time.Second)) || at.After(goneBy) || !at.Before(backAt) {
		t.Fatalf("the backstop's kill recorded at %s; it fired at its end plus grace (%s), was seen gone by %s, the API came back at %s",
			at, earliest, goneBy, backAt)
	}
}
