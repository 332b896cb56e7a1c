//go:build e2e

// Package multinode runs Warren across machines on one host: one
// `warren api` on Postgres and two `warren node` processes with real
// gVisor sandboxes, each node with host objects of its own, reached only
// through the node RPC and the node proxies; the client is the Go SDK
// (pkg/e2b) from the API's side.
package multinode

import (
	"context"
	"path/filepath"
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
func TestMain(m *testing.M) { e2eserve.Main(m, isoA, isoB) }

const (
	apiKey     = "e2b_a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3"
	adminToken = "multinode-admin-token-0123456789abcdef"
	nodeToken  = "multinode-node-token-0123456789"
	apiAddr    = "127.0.0.1:3890"
)

// TestTwoNodes: creates spread over two nodes and work through their node
// proxies (commands, files, a pause and resume on the same node); a node
// killed and kept down loses its sandboxes (node_lost) and gets no new
// ones; restarted, it is reconciled (nothing of its old sandboxes runs on
// it); a drained node gets no creates.
func TestTwoNodes(t *testing.T) {
	e2eserve.RunscPrerequisites(t)
	dsn := storetest.PostgresSchema(t)
	base := e2eserve.NodesDir(t, "multinode-e2e-")
	e2eserve.NoRunscLeftUnder(t, base)

	api := e2eserve.StartAPI(t, e2eserve.APIOptions{Name: "warren api", Listen: apiAddr, DSN: dsn,
		APIKey: apiKey, AdminToken: adminToken, NodeToken: nodeToken,
		ExtraArgs: e2eserve.ShortLiveness})
	adm := api.Admin
	cfg := e2b.Config{APIKey: apiKey, APIURL: api.Env["E2B_API_URL"], SandboxURL: api.Env["E2B_SANDBOX_URL"], Domain: "localhost:3890"}

	newNode := func(id, rpc, proxy, dir string, iso e2eserve.Isolation) *e2eserve.Node {
		return e2eserve.NewNode(e2eserve.NodeOptions{ID: id, RPCListen: rpc, ProxyListen: proxy,
			APIURL: "http://" + apiAddr, DataDir: filepath.Join(base, dir), Token: nodeToken, Isolation: iso})
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
