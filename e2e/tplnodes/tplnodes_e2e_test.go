//go:build e2e

// Package tplnodes runs template builds across nodes: two `warren api`
// replicas on one Postgres and two `warren node` processes with real
// gVisor sandboxes. A template built through the API runs on one node;
// both replicas answer for it; sandboxes of it start on the node that
// built it and, that node cordoned, on the other, which pulls the build
// from the first (for a build FROM the template); a template's snapshot
// on ready is restored on its builder and, pulled with the build, on the
// other. The
// client is the Go SDK (pkg/e2b), whose COPY files go through the API to
// the node that builds.
package tplnodes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/e2b"
)

// The two nodes' host objects, apart from every other test's.
var (
	isoA = e2eserve.NewIsolation("tna", "100.104.0.0/16", "ua")
	isoB = e2eserve.NewIsolation("tnb", "100.105.0.0/16", "ub")
)

// TestMain removes the nodes' cgroup roots and nftables tables at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, isoA, isoB) }

const (
	apiKey     = "e2b_b0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3"
	adminToken = "tplnodes-admin-token-0123456789abcdef"
	nodeToken  = "tplnodes-node-token-0123456789"
	api1Addr   = "127.0.0.1:3950"
	api2Addr   = "127.0.0.1:3951"
)

// api1 is the admin API of replica 1, which the nodes register with.
var api1 = e2eserve.Admin{URL: "http://" + api1Addr, Token: adminToken}

// startAPI starts a replica of warren api and waits for its exports.
func startAPI(t *testing.T, addr, dsn string) {
	t.Helper()
	e2eserve.StartAPI(t, e2eserve.APIOptions{Name: "warren api " + addr, Listen: addr, DSN: dsn,
		APIKey: apiKey, AdminToken: adminToken, NodeToken: nodeToken})
}

// node is one `warren node` of the test, and its ID.
type node struct {
	*e2eserve.Node
	id string
}

// newNode is the node id, registering with replica 1.
func newNode(id, rpc, proxy, dataDir string, iso e2eserve.Isolation) *node {
	return &node{id: id, Node: e2eserve.NewNode(e2eserve.NodeOptions{ID: id, RPCListen: rpc, ProxyListen: proxy,
		APIURL: api1.URL, DataDir: dataDir, Token: nodeToken, Isolation: iso})}
}

// call makes a request of the API at addr and returns the status and body.
func call(t *testing.T, addr, method, path string, header map[string]string, body ...string) (int, []byte) {
	t.Helper()
	return e2eserve.Call(t, method, "http://"+addr+path, header, body...)
}

// admin makes an admin request of replica 1 and returns its 2xx answer's
// body.
func admin(t *testing.T, method, path string) []byte {
	t.Helper()
	return api1.Call(t, method, path)
}

// nodeInfo is what the test reads of GET /admin/nodes.
type nodeInfo = e2eserve.NodeInfo

// waitNodes waits until cond holds of the registered nodes.
func waitNodes(t *testing.T, what string, timeout time.Duration, cond func(map[string]nodeInfo) bool) map[string]nodeInfo {
	t.Helper()
	return api1.WaitNodes(t, what, timeout, cond)
}

// twoNodes starts two warren api replicas over a Postgres schema of the
// test's own and two warren node processes, waits for both nodes to be
// ready, and returns them with the SDK's configuration for replica 1.
func twoNodes(t *testing.T) (*node, *node, e2b.Config) {
	t.Helper()
	e2eserve.RunscPrerequisites(t)
	dsn := storetest.PostgresSchema(t)
	base := e2eserve.NodesDir(t, "tplnodes-e2e-")

	startAPI(t, api1Addr, dsn)
	startAPI(t, api2Addr, dsn)
	a := newNode("tn-a", "127.0.0.1:3952", "127.0.0.1:3953", filepath.Join(base, "a"), isoA)
	b := newNode("tn-b", "127.0.0.1:3954", "127.0.0.1:3955", filepath.Join(base, "b"), isoB)
	for _, n := range []*node{a, b} {
		n.Run(t)
	}
	waitNodes(t, "both nodes ready", 3*time.Minute, func(m map[string]nodeInfo) bool {
		return m["tn-a"].Status == "ready" && m["tn-b"].Status == "ready"
	})

	return a, b, e2b.Config{APIKey: apiKey, APIURL: "http://" + api1Addr, SandboxURL: "http://" + api1Addr, Domain: "localhost:3950"}
}

// onNode reports whether sandbox id runs on n.
func onNode(t *testing.T, n *node, id string) bool {
	t.Helper()
	list, err := n.Client().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(list, func(s *nodeapi.Sandbox) bool { return s.ID == id })
}

// TestTemplateAcrossNodes: a template built through warren api (RUN
// steps, one setting a user attribute, and a COPY
// of an uploaded file) runs on one node, is listed alike by both
// replicas, and its sandboxes have the build's files and attributes on
// the node that built it and on the other, which pulls the build for a
// build FROM the template and then holds it; another team
// neither sees the template nor starts it.
func TestTemplateAcrossNodes(t *testing.T) {
	a, b, cfg := twoNodes(t)
	ctx := context.Background()
	var logs []string
	contextDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(contextDir, "copied.txt"), []byte("from the build context\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := e2b.BuildTemplate(ctx, e2b.TemplateOptions{
		Config: cfg, Name: "hi-across", FromTemplate: "base", ContextDir: contextDir,
		Steps: []e2b.TemplateStep{
			e2b.StepRun("echo hi > /hi && echo built-the-file", "root"),
			e2b.StepCopy("copied.txt", "/home/user/copied.txt", "user"),
			// An extended attribute the artifact carries. (A file
			// capability cannot be set in a build sandbox: gVisor answers
			// setcap "Operation not supported"; capabilities come from
			// image layers, TestPullKeepsExtendedAttributes.)
			e2b.StepRun(`python3 -c "import os; os.setxattr('/hi', 'user.e2b.k', b'v')"`, "root"),
		},
		OnLog: func(e e2b.BuildLogEntry) { logs = append(logs, e.Message) },
	})
	if err != nil {
		t.Fatalf("build through warren api: %v\nlogs: %s", err, strings.Join(logs, "\n"))
	}
	if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, "built-the-file") }) {
		t.Errorf("the build's own output is not in the log the API streamed: %q", logs)
	}

	// Both replicas answer for the template, from the shared catalog.
	key := map[string]string{"X-API-Key": apiKey}
	var seen []string
	for _, addr := range []string{api1Addr, api2Addr} {
		code, body := call(t, addr, "GET", "/templates/"+info.TemplateID, key)
		if code != http.StatusOK || !bytes.Contains(body, []byte(info.BuildID)) || !bytes.Contains(body, []byte(`"ready"`)) {
			t.Fatalf("GET /templates/%s on %s: %d %s", info.TemplateID, addr, code, body)
		}
		code, body = call(t, addr, "GET", "/templates/"+info.TemplateID+"/builds/"+info.BuildID+"/status", key)
		if code != http.StatusOK || !bytes.Contains(body, []byte("built-the-file")) {
			t.Fatalf("build status on %s: %d %s", addr, code, body)
		}
		seen = append(seen, string(body))
	}
	if seen[0] != seen[1] {
		t.Errorf("the replicas answer the build's status differently:\n%s\n%s", seen[0], seen[1])
	}

	// The node that built it says it holds it; a create goes there.
	held := waitNodes(t, "the builder reports the build", time.Minute, func(m map[string]nodeInfo) bool {
		return slices.Contains(m["tn-a"].Templates, info.BuildID) != slices.Contains(m["tn-b"].Templates, info.BuildID)
	})
	builder, other := a, b
	if slices.Contains(held["tn-b"].Templates, info.BuildID) {
		builder, other = b, a
	}
	hasHi := func(sb *e2b.Sandbox, where string) {
		t.Helper()
		r, err := sb.Commands.Run(ctx, "cat /hi /home/user/copied.txt", e2b.RunOptions{})
		if err != nil || r.Stdout != "hi\nfrom the build context\n" {
			t.Fatalf("cat /hi /home/user/copied.txt in a sandbox on %s: %+v %v", where, r, err)
		}
		r, err = sb.Commands.Run(ctx, `python3 -c "import os; print(os.getxattr('/hi', 'user.e2b.k'))"`, e2b.RunOptions{})
		if err != nil || r.Stdout != "b'v'\n" {
			t.Errorf("the build's extended attribute in a sandbox on %s: %+v %v", where, r, err)
		}
	}
	first, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Template: "hi-across", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !onNode(t, builder, first.ID) {
		t.Errorf("the first sandbox of the template is not on %s, the node that holds it", builder.id)
	}
	hasHi(first, builder.id)

	// The builder cordoned, a build FROM the template (a Dockerfile's
	// FROM, through warren template build) goes to the other node, which
	// pulls the parent build first.
	admin(t, "POST", "/admin/nodes/"+builder.id+"/cordon")
	childDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(childDir, "Dockerfile"), []byte("FROM hi-across\nRUN cat /hi > /hi-child\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := exec.Command(os.Getenv("WARREN_WARREN"), "template", "build", "--name", "hi-child", childDir)
	cli.Env = append(os.Environ(), "E2B_API_URL=http://"+api1Addr, "E2B_API_KEY="+apiKey)
	if out, err := cli.CombinedOutput(); err != nil {
		t.Fatalf("warren template build FROM a team's template through warren api: %v\n%s", err, out)
	}
	child, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Template: "hi-child", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !onNode(t, other, child.ID) {
		t.Errorf("the child template's sandbox is not on %s, which built it", other.id)
	}
	if r, err := child.Commands.Run(ctx, "cat /hi-child", e2b.RunOptions{}); err != nil || r.Stdout != "hi\n" {
		t.Fatalf("cat /hi-child: %+v %v", r, err)
	}

	// The next create goes to the other node too, which holds the build
	// now (through replica 2, to show it is the database's).
	cfg2 := cfg
	cfg2.APIURL, cfg2.SandboxURL, cfg2.Domain = "http://"+api2Addr, "http://"+api2Addr, "localhost:3951"
	second, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg2, Template: "hi-across", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatalf("create on the node that lacks the build: %v", err)
	}
	if !onNode(t, other, second.ID) {
		t.Fatalf("the second sandbox is not on %s", other.id)
	}
	hasHi(second, other.id)
	waitNodes(t, "both nodes report the build", time.Minute, func(m map[string]nodeInfo) bool {
		return slices.Contains(m["tn-a"].Templates, info.BuildID) && slices.Contains(m["tn-b"].Templates, info.BuildID)
	})
	admin(t, "POST", "/admin/nodes/"+builder.id+"/uncordon")

	// Another team neither sees the template nor starts it, by name or ID.
	var team struct {
		ID     string `json:"id"`
		APIKey string `json:"apiKey"`
	}
	code, body := call(t, api1Addr, "POST", "/admin/teams", map[string]string{"X-Admin-Token": adminToken}, `{"name":"other"}`)
	if code/100 != 2 || json.Unmarshal(body, &team) != nil || team.APIKey == "" {
		t.Fatalf("create a team: %d %s", code, body)
	}
	otherKey := map[string]string{"X-API-Key": team.APIKey}
	if code, body := call(t, api2Addr, "GET", "/templates/"+info.TemplateID, otherKey); code != http.StatusNotFound {
		t.Errorf("another team's GET of the template: %d %s", code, body)
	}
	cfgOther := cfg
	cfgOther.APIKey = team.APIKey
	for _, ref := range []string{"hi-across", info.TemplateID} {
		if sb, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfgOther, Template: ref}); err == nil {
			sb.Kill(ctx)
			t.Errorf("another team started the template as %q", ref)
		} else if !strings.Contains(fmt.Sprint(err), "404") && !strings.Contains(strings.ToLower(fmt.Sprint(err)), "not found") {
			t.Errorf("another team's create of %q: %v, want not found", ref, err)
		}
	}

	// A Dockerfile built with `warren template build` through the other
	// replica, started on whichever node placement picks.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM base\nRUN echo dockerfile > /hi-df\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli = exec.Command(os.Getenv("WARREN_WARREN"), "template", "build", "--name", "hi-df", dir)
	cli.Env = append(os.Environ(), "E2B_API_URL=http://"+api2Addr, "E2B_API_KEY="+apiKey)
	if out, err := cli.CombinedOutput(); err != nil {
		t.Fatalf("warren template build through warren api: %v\n%s", err, out)
	}
	df, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Template: "hi-df", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := df.Commands.Run(ctx, "cat /hi-df", e2b.RunOptions{}); err != nil || r.Stdout != "dockerfile\n" {
		t.Fatalf("cat /hi-df: %+v %v", r, err)
	}
}

// TestSnapshotOnReadyAcrossNodes: a template with a start and a ready
// command starts from its snapshot on ready on the node that built it and
// on the other, which pulls the build and its snapshot (the start command
// ran before the create in both); the log gives the creates' times.
func TestSnapshotOnReadyAcrossNodes(t *testing.T) {
	builder, other, cfg := twoNodes(t)
	ctx := context.Background()
	var logs []string
	info, err := e2b.BuildTemplate(ctx, e2b.TemplateOptions{
		Config: cfg, Name: "snap-across", FromTemplate: "base",
		StartCmd: "date +%s%N > /tmp/started; sleep infinity", ReadyCmd: "test -s /tmp/started",
		OnLog: func(e e2b.BuildLogEntry) { logs = append(logs, e.Message) },
	})
	if err != nil {
		t.Fatalf("build: %v\nlogs: %s", err, strings.Join(logs, "\n"))
	}
	held := waitNodes(t, "the builder reports the build", time.Minute, func(m map[string]nodeInfo) bool {
		return slices.Contains(m["tn-a"].Templates, info.BuildID) != slices.Contains(m["tn-b"].Templates, info.BuildID)
	})
	if slices.Contains(held[other.id].Templates, info.BuildID) {
		builder, other = other, builder
	}
	// create makes a sandbox, which must land on where, and returns how
	// long the create took and when its start command ran (Unix ns), -1
	// for before the create began (restored from the snapshot).
	create := func(where *node) (time.Duration, int64) {
		t.Helper()
		begin := time.Now()
		sb, err := e2b.Create(ctx, e2b.CreateOptions{Config: cfg, Template: "snap-across", Timeout: 5 * time.Minute})
		took := time.Since(begin)
		if err != nil {
			t.Fatalf("create on %s: %v", where.id, err)
		}
		if !onNode(t, where, sb.ID) {
			t.Fatalf("the sandbox is not on %s", where.id)
		}
		r, err := sb.Commands.Run(ctx, "cat /tmp/started", e2b.RunOptions{})
		if err != nil {
			t.Fatalf("cat /tmp/started on %s: %+v %v", where.id, r, err)
		}
		var ns int64
		if _, err := fmt.Sscan(r.Stdout, &ns); err != nil {
			t.Fatalf("/tmp/started on %s = %q", where.id, r.Stdout)
		}
		if ns < begin.UnixNano() {
			return took, -1 // from the snapshot: started before the create
		}
		return took, ns
	}
	warm, ns := create(builder)
	if ns != -1 {
		t.Errorf("the sandbox on the builder ran its start command after the create began: not restored from the snapshot")
	}
	admin(t, "POST", "/admin/nodes/"+builder.id+"/cordon")
	// The other node pulls the build with its snapshot (both nodes run on
	// this machine: the same runsc, CPU and defaults) and restores it.
	pulled, ns := create(other)
	if ns != -1 {
		t.Errorf("the first sandbox on the other node ran its start command after the create began: not restored from the pulled snapshot")
	}
	again, ns := create(other)
	if ns != -1 {
		t.Errorf("the next sandbox on the other node ran its start command after the create began: not restored from its copy of the snapshot")
	}
	admin(t, "POST", "/admin/nodes/"+builder.id+"/uncordon")
	t.Logf("create of a template with a snapshot on ready: on its builder (restore) %v; on another node, pulling the build and its snapshot and restoring %v, then restoring its copy %v", warm, pulled, again)
}
