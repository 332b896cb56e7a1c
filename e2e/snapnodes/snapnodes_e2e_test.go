//go:build e2e

// Package snapnodes runs sandbox snapshots across machines on one host:
// one `warren api` on Postgres and two `warren node` processes with real
// gVisor sandboxes, each node with host objects of its own. The client is
// the real E2B SDK (node scripts) and the REST API. A snapshot of a
// sandbox on one node restores, with its files, memory and processes, on
// the other, which pulls the snapshot's build from the first (its
// artifacts checked against the digests the API recorded); another team
// neither lists nor starts it; a team's snapshot limit holds; a sandbox's
// logs come through its node.
package snapnodes

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// The two nodes' host objects, apart from every other test's.
var (
	isoA = e2eserve.NewIsolation("sna", "100.118.0.0/16", "sa")
	isoB = e2eserve.NewIsolation("snb", "100.119.0.0/16", "sb")
)

// TestMain removes the nodes' cgroup roots and nftables tables at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, isoA, isoB) }

const (
	apiKey     = "e2b_d0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3"
	adminToken = "snapnodes-admin-token-0123456789abcdef"
	nodeToken  = "snapnodes-node-token-0123456789"
	apiAddr    = "127.0.0.1:4600"
)

// script runs a node script of this directory with env and decodes the
// JSON of its last line of output into out; a failing script fails the
// test.
func script(t *testing.T, env []string, out any, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{name}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\n%s%s", name, err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), out); err != nil {
		t.Fatalf("node %s printed %q: %v", name, stdout.String(), err)
	}
}

// call makes a request of the API with the header key: value.
func call(t *testing.T, method, path, key, value string, body ...string) (int, []byte) {
	t.Helper()
	return e2eserve.Call(t, method, "http://"+apiAddr+path, map[string]string{key: value}, body...)
}

// newTeam makes a team with body (its name, limits) and returns its key.
func newTeam(t *testing.T, body string) string {
	t.Helper()
	var team struct {
		APIKey string `json:"apiKey"`
	}
	code, b := call(t, "POST", "/admin/teams", "X-Admin-Token", adminToken, body)
	if code/100 != 2 || json.Unmarshal(b, &team) != nil || team.APIKey == "" {
		t.Fatalf("create team %s: %d %s", body, code, b)
	}
	return team.APIKey
}

// createSandbox starts a sandbox of ref for key through the REST API and
// returns its ID, or fails the test unless the answer is want.
func createSandbox(t *testing.T, key, ref string, want int) string {
	t.Helper()
	code, b := call(t, "POST", "/v2/sandboxes", "X-API-Key", key, `{"templateID":"`+ref+`","timeout":600}`)
	if code != want {
		t.Fatalf("create from %q: %d %s, want %d", ref, code, b, want)
	}
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	json.Unmarshal(b, &sb) // an error answer has none
	return sb.SandboxID
}

// TestSandboxSnapshotAcrossNodes: a snapshot of a running sandbox, taken
// through the SDK on the node that runs it, restores on the other node
// (the first cordoned) with the source's file, /tmp and process; that node
// then holds the snapshot's build. The restored sandbox's logs come
// through its node. Another team neither lists, starts nor takes it; a
// team with a limit of one snapshot is refused a second; a deleted
// snapshot starts nowhere.
func TestSandboxSnapshotAcrossNodes(t *testing.T) {
	e2eserve.Prerequisites(t)
	dsn := storetest.PostgresSchema(t)
	base := e2eserve.NodesDir(t, "snapnodes-e2e-")
	e2eserve.NoRunscLeftUnder(t, base)

	api := e2eserve.StartAPI(t, e2eserve.APIOptions{Name: "warren api", Listen: apiAddr, DSN: dsn,
		APIKey: apiKey, AdminToken: adminToken, NodeToken: nodeToken})
	adm := api.Admin
	newNode := func(id, rpc, proxy, dir string, iso e2eserve.Isolation) *e2eserve.Node {
		return e2eserve.NewNode(e2eserve.NodeOptions{ID: id, RPCListen: rpc, ProxyListen: proxy,
			APIURL: "http://" + apiAddr, DataDir: filepath.Join(base, dir), Token: nodeToken, Isolation: iso})
	}
	a := newNode("sn-a", "127.0.0.1:4601", "127.0.0.1:4602", "a", isoA)
	b := newNode("sn-b", "127.0.0.1:4603", "127.0.0.1:4604", "b", isoB)
	for _, n := range []*e2eserve.Node{a, b} {
		n.Run(t)
	}
	adm.WaitNodes(t, "both nodes ready", 3*time.Minute, func(m map[string]e2eserve.NodeInfo) bool {
		return m["sn-a"].Status == "ready" && m["sn-b"].Status == "ready"
	})
	env := []string{"E2B_API_URL=" + api.Env["E2B_API_URL"], "E2B_SANDBOX_URL=" + api.Env["E2B_SANDBOX_URL"], "E2B_API_KEY=" + apiKey}

	var took struct {
		SandboxID, SnapshotID string
		TookMs                int64
	}
	script(t, env, &took, "take.mjs", "across")
	holder, other := a, b
	if slices.Contains(b.Running(t), took.SandboxID) {
		holder, other = b, a
	}
	if !slices.Contains(holder.Running(t), took.SandboxID) {
		t.Fatalf("the source %s runs on neither node", took.SandboxID)
	}
	// The snapshot's build, as the API names it.
	code, body := call(t, "GET", "/templates/aliases/across", "X-API-Key", apiKey)
	var alias struct {
		TemplateID string `json:"templateID"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &alias) != nil || alias.TemplateID == "" {
		t.Fatalf("GET /templates/aliases/across: %d %s", code, body)
	}
	code, body = call(t, "GET", "/templates/"+alias.TemplateID, "X-API-Key", apiKey)
	var tmpl struct {
		Builds []struct {
			BuildID string `json:"buildID"`
			Status  string `json:"status"`
		} `json:"builds"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &tmpl) != nil || len(tmpl.Builds) != 1 || tmpl.Builds[0].Status != "ready" {
		t.Fatalf("GET /templates/%s: %d %s", alias.TemplateID, code, body)
	}
	buildID := tmpl.Builds[0].BuildID
	adm.WaitNodes(t, "the holder reports the snapshot's build", time.Minute, func(m map[string]e2eserve.NodeInfo) bool {
		return slices.Contains(m[holder.ID].Templates, buildID) && !slices.Contains(m[other.ID].Templates, buildID)
	})

	// The holder cordoned, the create goes to the other node, which pulls
	// the build and restores the snapshot.
	adm.Call(t, "POST", "/admin/nodes/"+holder.ID+"/cordon")
	var restored struct {
		SandboxID string
		TookMs    int64
	}
	script(t, env, &restored, "restore.mjs", took.SnapshotID)
	if !slices.Contains(other.Running(t), restored.SandboxID) {
		t.Fatalf("the sandbox from the snapshot is not on %s, the node the create had to go to", other.ID)
	}
	adm.WaitNodes(t, "the other node reports the snapshot's build", time.Minute, func(m map[string]e2eserve.NodeInfo) bool {
		return slices.Contains(m[other.ID].Templates, buildID)
	})
	adm.Call(t, "POST", "/admin/nodes/"+holder.ID+"/uncordon")
	t.Logf("snapshot on %s took %d ms; create from it on %s (pull and restore) %d ms", holder.ID, took.TookMs, other.ID, restored.TookMs)

	// Its logs (envd's own lines) come through its node.
	code, body = call(t, "GET", "/v2/sandboxes/"+restored.SandboxID+"/logs", "X-API-Key", apiKey)
	if code != http.StatusOK || !bytes.Contains(body, []byte("init applied")) {
		t.Errorf("logs of the restored sandbox: %d %s, want envd's lines", code, body)
	}

	// Another team neither lists, starts nor takes it.
	otherKey := newTeam(t, `{"name":"other"}`)
	if code, body := call(t, "GET", "/snapshots", "X-API-Key", otherKey); code != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("another team's GET /snapshots: %d %s", code, body)
	}
	for _, ref := range []string{took.SnapshotID, alias.TemplateID} {
		createSandbox(t, otherKey, ref, http.StatusNotFound)
	}
	if code, body := call(t, "POST", "/sandboxes/"+took.SandboxID+"/snapshots", "X-API-Key", otherKey, `{}`); code != http.StatusNotFound {
		t.Errorf("another team's snapshot of the source: %d %s", code, body)
	}

	// A team's snapshot limit holds under warren api.
	limitedKey := newTeam(t, `{"name":"limited","limits":{"maxSnapshots":1}}`)
	lim := createSandbox(t, limitedKey, "base", http.StatusCreated)
	if code, body := call(t, "POST", "/sandboxes/"+lim+"/snapshots", "X-API-Key", limitedKey, `{"name":"first"}`); code != http.StatusCreated {
		t.Fatalf("the limited team's first snapshot: %d %s", code, body)
	}
	if code, body := call(t, "POST", "/sandboxes/"+lim+"/snapshots", "X-API-Key", limitedKey, `{"name":"second"}`); code != http.StatusTooManyRequests {
		t.Errorf("the limited team's second snapshot: %d %s, want 429", code, body)
	}

	// Deleted, it starts nowhere.
	if code, body := call(t, "DELETE", "/templates/"+alias.TemplateID, "X-API-Key", apiKey); code != http.StatusNoContent {
		t.Fatalf("delete the snapshot: %d %s", code, body)
	}
	createSandbox(t, apiKey, took.SnapshotID, http.StatusNotFound)
}
