//go:build e2e

// Package multinode runs Warren across machines on one host: one
// `warren api` on Postgres and two `warren node` processes with real
// gVisor sandboxes, each node with host objects of its own, reached only
// through the node RPC and the node proxies; the client is the Go SDK
// (pkg/e2b) from the API's side.
package multinode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/e2b"
)

// The two nodes' host objects, apart from every other test's.
var (
	isoA = e2eserve.NewIsolation("mna", "100.98.0.0/16", "na")
	isoB = e2eserve.NewIsolation("mnb", "100.99.0.0/16", "nb")
)

// TestMain removes the nodes' cgroup roots and nftables tables at the end.
func TestMain(m *testing.M) {
	code := m.Run()
	isoA.Cleanup()
	isoB.Cleanup()
	os.Exit(code)
}

const (
	apiKey     = "e2b_a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3"
	adminToken = "multinode-admin-token"
	nodeToken  = "multinode-node-token-0123456789"
	apiAddr    = "127.0.0.1:3890"
)

// proc is a started warren process and what it wrote to stderr.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	out  chan string // stdout lines
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

func (p *proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// start runs the warren binary with args; the test's end stops it (SIGTERM)
// if it still runs and logs its stderr when the test failed.
func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(os.Getenv("WARREN_WARREN"), args...), out: make(chan string, 64)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case p.out <- sc.Text():
			default:
			}
		}
		close(p.out)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.Logs())
		}
	})
	return p
}

// stop ends the process with SIGTERM (SIGKILL after 30 s) unless it ended.
func (p *proc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// node is one `warren node` of the test: its ID, addresses and data dir.
type node struct {
	id, rpc, proxy, dataDir string
	iso                     e2eserve.Isolation
	p                       *proc
}

func (n *node) run(t *testing.T) {
	t.Helper()
	n.p = start(t, "warren node "+n.id, []string{"WARREN_NODE_TOKEN=" + nodeToken},
		"node", "--node-id", n.id, "--rpc-listen", n.rpc, "--proxy-listen", n.proxy, "--api-url", "http://"+apiAddr,
		"--data-dir", n.dataDir, "--runsc", os.Getenv("WARREN_RUNSC"), "--envd", os.Getenv("WARREN_ENVD"),
		"--base-rootfs", os.Getenv("WARREN_TEST_ROOTFS_TAR"), "--cgroup-root", n.iso.CgroupRoot,
		"--nft-table", n.iso.Table, "--net-cidr", n.iso.CIDR, "--veth-prefix", n.iso.VethPrefix)
}

// client is the node's RPC, as the API calls it.
func (n *node) client() *nodeclient.Client {
	return nodeclient.New("http://"+n.rpc, nodeclient.Options{Token: nodeToken})
}

// nodeInfo is what the test reads of GET /admin/nodes.
type nodeInfo struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	BootID    string `json:"bootID"`
	Sandboxes int    `json:"sandboxes"`
}

func admin(t *testing.T, method, path string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+apiAddr+path, nil)
	req.Header.Set("X-Admin-Token", adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return b
}

func nodes(t *testing.T) map[string]nodeInfo {
	t.Helper()
	var list []nodeInfo
	if err := json.Unmarshal(admin(t, "GET", "/admin/nodes"), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]nodeInfo{}
	for _, n := range list {
		out[n.ID] = n
	}
	return out
}

// waitNodes waits until cond holds of the registered nodes.
func waitNodes(t *testing.T, what string, timeout time.Duration, cond func(map[string]nodeInfo) bool) map[string]nodeInfo {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := nodes(t)
		if cond(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; nodes %+v", what, timeout, n)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestTwoNodes: creates spread over two nodes and work through their node
// proxies (commands, files, a pause and resume on the same node); a node
// killed and kept down loses its sandboxes (node_lost) and gets no new
// ones; restarted, it is reconciled (nothing of its old sandboxes runs on
// it); a drained node gets no creates.
func TestTwoNodes(t *testing.T) {
	e2eserve.Require(t, os.Geteuid() == 0, "needs root (network namespaces, cgroups, runsc)")
	for _, env := range []string{"WARREN_WARREN", "WARREN_RUNSC", "WARREN_ENVD", "WARREN_TEST_ROOTFS_TAR"} {
		e2eserve.Require(t, e2eserve.Exists(os.Getenv(env)), "$"+env+" does not exist; run make build base-rootfs")
	}
	dsn := storetest.PostgresSchema(t)
	if err := os.MkdirAll("../../var", 0o755); err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("../../var", "multinode-e2e-")
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

	api := start(t, "warren api", []string{"WARREN_NODE_TOKEN=" + nodeToken},
		"api", "--listen", apiAddr, "--database-url", dsn, "--api-key", apiKey, "--admin-token", adminToken,
		"--metrics-listen", "", "--node-unreachable-after", "11s", "--node-lost-after", "16s", "--node-paused-lost-after", "16s")
	env := map[string]string{}
	re := regexp.MustCompile(`^export (\w+)=(\S+)$`)
	for env["E2B_API_URL"] == "" || env["E2B_SANDBOX_URL"] == "" {
		select {
		case l, ok := <-api.out:
			if !ok {
				t.Fatalf("warren api exited:\n%s", api.Logs())
			}
			if m := re.FindStringSubmatch(l); m != nil {
				env[m[1]] = m[2]
			}
		case <-time.After(time.Minute):
			t.Fatalf("warren api printed no exports:\n%s", api.Logs())
		}
	}
	cfg := e2b.Config{APIKey: apiKey, APIURL: env["E2B_API_URL"], SandboxURL: env["E2B_SANDBOX_URL"], Domain: "localhost:3890"}

	a := &node{id: "mn-a", rpc: "127.0.0.1:3891", proxy: "127.0.0.1:3892", dataDir: filepath.Join(base, "a"), iso: isoA}
	b := &node{id: "mn-b", rpc: "127.0.0.1:3893", proxy: "127.0.0.1:3894", dataDir: filepath.Join(base, "b"), iso: isoB}
	t.Cleanup(func() { e2eserve.UnmountUnder(t, base) })
	for _, n := range []*node{a, b} {
		n.run(t)
		t.Cleanup(func() { // before the node stops: kill what is left on it
			if list, err := n.client().List(context.Background()); err == nil {
				for _, sb := range list {
					n.client().Kill(context.Background(), sb.ID, "request") //nolint:errcheck
				}
			}
		})
	}
	waitNodes(t, "both nodes ready", 3*time.Minute, func(m map[string]nodeInfo) bool {
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
	spread := nodes(t)
	if spread["mn-a"].Sandboxes == 0 || spread["mn-b"].Sandboxes == 0 || spread["mn-a"].Sandboxes+spread["mn-b"].Sandboxes != 4 {
		t.Fatalf("4 creates over two nodes: %+v", spread)
	}
	onNode := map[string]string{} // sandbox ID → node ID
	for _, n := range []*node{a, b} {
		list, err := n.client().List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			onNode[s.ID] = n.id
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
	if onNode[p.ID] == b.id {
		holder = b
	}
	if s, err := holder.client().Get(ctx, p.ID); err != nil || string(s.State) != "running" {
		t.Fatalf("resumed sandbox on %s: %+v %v", holder.id, s, err)
	}

	// Node B killed and kept down: its sandboxes become node_lost, new
	// creates avoid it.
	bootB := spread["mn-b"].BootID
	if err := b.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = b.p.cmd.Wait()
	waitNodes(t, "node B lost", time.Minute, func(m map[string]nodeInfo) bool { return m["mn-b"].Status == "lost" })
	// The node reads as lost first; its sandboxes are then killed with
	// node_lost by the same liveness check.
	for _, sb := range sbs {
		if onNode[sb.ID] != b.id {
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
	before := nodes(t)["mn-a"].Sandboxes
	extra := create()
	if got := nodes(t)["mn-a"].Sandboxes; got != before+1 {
		t.Errorf("create while B is lost: node A has %d sandboxes, want %d", got, before+1)
	}
	if r, err := extra.Commands.Run(ctx, "true", e2b.RunOptions{}); err != nil {
		t.Errorf("command in a sandbox created while B is lost: %+v %v", r, err)
	}

	// Restarted on the same machine boot (its boot ID is the host's), B is
	// ready again, and what ran on it before, killed by the control plane
	// while B was lost, is killed there too: the store is the truth.
	b.run(t)
	back := waitNodes(t, "node B back", 3*time.Minute, func(m map[string]nodeInfo) bool {
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
		list, err := b.client().List(ctx)
		if err == nil && len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node still runs its old sandboxes: %+v %v", list, err)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Drained, B gets no creates.
	admin(t, "POST", "/admin/nodes/mn-b/drain")
	before = nodes(t)["mn-a"].Sandboxes
	for range 2 {
		create()
	}
	if m := nodes(t); m["mn-a"].Sandboxes != before+2 || m["mn-b"].Sandboxes != 0 || m["mn-b"].Status != "draining" {
		t.Errorf("creates while B drains: %+v", m)
	}
}

// runscUnder lists the PIDs of runsc processes whose --root lies under dir
// (the sandboxes of the test's nodes).
func runscUnder(dir string) []int {
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("--root="+dir)) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}
