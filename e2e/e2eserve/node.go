package e2eserve

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/nodeauth"
)

// RunscPrerequisites checks what a runsc-backed warren (serve, node)
// needs: root, the built binaries and the rootfs.
func RunscPrerequisites(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root (network namespaces, cgroups, runsc)")
	for _, env := range []string{"WARREN_WARREN", "WARREN_RUNSC", "WARREN_ENVD", "WARREN_TEST_ROOTFS_TAR"} {
		Require(t, Exists(os.Getenv(env)), fmt.Sprintf("$%s (%q) does not exist; run make build base-rootfs", env, os.Getenv(env)))
	}
}

// NodesDir makes a directory of the test's own, named prefix and a random
// suffix, under the repository's var/ (the tests run in a subdirectory of
// e2e/) for its nodes' data dirs, and returns its absolute path. The
// test's end unmounts what is left below it and removes it.
func NodesDir(t testing.TB, prefix string) string {
	t.Helper()
	if err := os.MkdirAll("../../var", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("../../var", prefix)
	if err != nil {
		t.Fatal(err)
	}
	dir, _ = filepath.Abs(dir)
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Cleanup(func() { UnmountUnder(t, dir) })
	return dir
}

// NoRunscLeftUnder fails the test at its end if runsc processes whose
// --root lies under dir (the sandboxes of the test's nodes) still run once
// the nodes stopped, and kills them. Call it before starting the nodes, so
// that its check comes after their clean-up.
func NoRunscLeftUnder(t testing.TB, dir string) {
	t.Cleanup(func() {
		if left := runscUnder(dir); len(left) > 0 {
			t.Errorf("runsc processes left under the nodes' data dirs: %v", left)
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// runscUnder lists the PIDs of runsc processes whose --root lies under dir.
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

// NodeOptions describe one `warren node`.
type NodeOptions struct {
	ID, RPCListen, ProxyListen string
	APIURL                     string // where it registers
	DataDir                    string
	// Token, when it is a node token (wnt_…), is the node's own; anything
	// else (a test's shared string, or none) has the first Run issue the
	// node its own token through the admin API of the API at APIURL
	// (StartAPI).
	Token     string
	Isolation Isolation
	// Command, when set, makes the command to start of the node's command
	// line (to run it in a network namespace, say); nil runs it as is.
	Command func(name string, args ...string) *exec.Cmd
	// ExtraArgs are added to the command line (e.g. --backstop-grace).
	ExtraArgs []string
}

// Node is one `warren node` of a test; Run starts it, and again after it
// ended. It serves TLS with a certificate of the test CA for its
// RPCListen and ProxyListen hosts.
type Node struct {
	NodeOptions
	P *Proc // its last run
	// NodeToken is the node's own token (issued at the first Run).
	NodeToken string
}

// NewNode returns the node o describes, not started.
func NewNode(o NodeOptions) *Node { return &Node{NodeOptions: o} }

// Run starts the node with the runsc driver on its isolation's host
// objects. The test's end kills the sandboxes left on it (through its
// RPC), then stops it.
func (n *Node) Run(t testing.TB) {
	t.Helper()
	command := n.Command
	if command == nil {
		command = exec.Command
	}
	if n.NodeToken == "" {
		n.NodeToken = n.Token
		if !nodeauth.ValidToken(n.NodeToken) {
			admin, ok := apis.Load(n.APIURL)
			if !ok {
				t.Fatalf("node %s: no API started at %s to issue its token", n.ID, n.APIURL)
			}
			n.NodeToken = admin.(Admin).IssueNodeToken(t, n.ID)
		}
	}
	rpcHost, _, _ := net.SplitHostPort(n.RPCListen)
	proxyHost, _, _ := net.SplitHostPort(n.ProxyListen)
	cert, key := IssueCert(t, n.DataDir+".tls", rpcHost, proxyHost)
	cmd := command(os.Getenv("WARREN_WARREN"), "node", "--node-id", n.ID, "--rpc-listen", n.RPCListen,
		"--proxy-listen", n.ProxyListen, "--api-url", n.APIURL, "--data-dir", n.DataDir,
		"--tls-cert", cert, "--tls-key", key, "--node-ca", CAFile(t),
		"--runsc", os.Getenv("WARREN_RUNSC"), "--envd", os.Getenv("WARREN_ENVD"),
		"--base-rootfs", os.Getenv("WARREN_TEST_ROOTFS_TAR"), "--cgroup-root", n.Isolation.CgroupRoot,
		"--nft-table", n.Isolation.Table, "--net-cidr", n.Isolation.CIDR, "--veth-prefix", n.Isolation.VethPrefix)
	cmd.Args = append(cmd.Args, n.ExtraArgs...)
	n.P = StartProc(t, "warren node "+n.ID, cmd, "WARREN_NODE_TOKEN="+n.NodeToken)
	t.Cleanup(func() { // before the node stops: kill what is left on it
		if list, err := n.Client().List(context.Background()); err == nil {
			for _, sb := range list {
				n.Client().Kill(context.Background(), sb.ID, "request")
			}
		}
	})
}

// Client is the node's RPC, as the API calls it: over TLS, with the
// control plane's credential of the node.
func (n *Node) Client() *nodeclient.Client {
	pool := x509.NewCertPool()
	if c, err := testCA(); err == nil {
		pool.AddCert(c.cert)
	}
	return nodeclient.New("https://"+n.RPCListen, nodeclient.Options{TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		Token: nodeauth.Credential(n.NodeToken, nodeauth.PurposeRPC)})
}

// KillCount is the node's own sandbox_killed_total for reason, read from
// its metrics (the RPC listener's GET /metrics over TLS, with the node's
// metrics credential).
func (n *Node) KillCount(t testing.TB, reason string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://"+n.RPCListen+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+nodeauth.Credential(n.NodeToken, nodeauth.PurposeMetrics))
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: ClientTLS(t)}, Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("metrics of node %s: %v", n.ID, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics of node %s: %d %s", n.ID, resp.StatusCode, body)
	}
	var v int
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, `sandbox_killed_total{kill_reason="`+reason+`"} `); ok {
			fmt.Sscanf(rest, "%d", &v) // absent: 0
		}
	}
	return v
}

// Running lists the IDs of the sandboxes the node runs (its own word).
func (n *Node) Running(t testing.TB) []string {
	t.Helper()
	list, err := n.Client().List(context.Background())
	if err != nil {
		t.Fatalf("list on node %s: %v", n.ID, err)
	}
	var ids []string
	for _, s := range list {
		if s.State == "running" {
			ids = append(ids, s.ID)
		}
	}
	return ids
}
