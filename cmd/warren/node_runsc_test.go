package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// nodeIso names the host objects of this file's `warren node` apart from
// every other test's.
var nodeIso = e2eserve.Isolation{CgroupRoot: fmt.Sprintf("wnode-bin-%d", os.Getpid()),
	Table: fmt.Sprintf("wnodebin%d", os.Getpid()), CIDR: "100.73.0.0/16", VethPrefix: "wno"}

// Ports of this file's node (127.0.0.1:3810-3819 are this test's).
const (
	nodeRPCAddr   = "127.0.0.1:3810"
	nodeProxyAddr = "127.0.0.1:3811"
)

// startNodeBinary runs the warren binary's `warren node` with real runsc
// on loopback and waits until it serves; the test's end kills what is
// left on it, stops it with SIGTERM and removes its host objects.
func startNodeBinary(t *testing.T, token string) (dataDir string) {
	t.Helper()
	testenv.NeedRoot(t, "network namespaces, cgroups and runsc")
	for _, env := range []string{"WARREN_WARREN", "WARREN_RUNSC", "WARREN_ENVD", "WARREN_TEST_ROOTFS_TAR"} {
		e2eserve.Require(t, e2eserve.Exists(os.Getenv(env)), fmt.Sprintf("$%s (%q) does not exist; run make build base-rootfs", env, os.Getenv(env)))
	}
	dataDir, err := os.MkdirTemp("", "wnode-data-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Getenv("WARREN_WARREN"), "node", "--rpc-listen", nodeRPCAddr, "--proxy-listen", nodeProxyAddr,
		"--node-id", "wnode-test", "--api-url", "http://127.0.0.1:3819", "--data-dir", dataDir,
		"--runsc", os.Getenv("WARREN_RUNSC"), "--envd", os.Getenv("WARREN_ENVD"), "--base-rootfs", os.Getenv("WARREN_TEST_ROOTFS_TAR"),
		"--cgroup-root", nodeIso.CgroupRoot, "--nft-table", nodeIso.Table, "--net-cidr", nodeIso.CIDR, "--veth-prefix", nodeIso.VethPrefix)
	cmd.Env = append(os.Environ(), "WARREN_NODE_TOKEN="+token)
	logs := &syncBuffer{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := nodeclient.New("http://"+nodeRPCAddr, nodeclient.Options{Token: nodeauth.Credential(token, nodeauth.PurposeRPC)})
		if list, err := c.List(context.Background()); err == nil {
			for _, sb := range list {
				c.Kill(context.Background(), sb.ID, sandbox.KillRequest)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("warren node: %v", err)
		}
		e2eserve.UnmountUnder(t, dataDir)
		nodeIso.Cleanup()
		os.RemoveAll(dataDir)
		if t.Failed() {
			t.Logf("warren node log:\n%s", logs.String())
		}
	})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "# warren node ") {
				ready <- sc.Text()
			}
		}
		close(ready)
	}()
	select {
	case l, ok := <-ready:
		if !ok {
			t.Fatalf("warren node exited before serving:\n%s", logs.String())
		}
		t.Log(l)
	case <-time.After(5 * time.Minute): // the first start unpacks the base rootfs
		t.Fatalf("warren node not serving after 5 minutes:\n%s", logs.String())
	}
	return dataDir
}

// hop adds the headers an edge proxy sends a node proxy.
type hop struct {
	token, id string
	port      int
}

func (h hop) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.token != "" {
		r.Header.Set(proxy.HeaderNodeToken, h.token)
	}
	r.Header.Set(proxy.HeaderNodeSandboxID, h.id)
	r.Header.Set(proxy.HeaderNodeSandboxPort, strconv.Itoa(h.port))
	return http.DefaultTransport.RoundTrip(r)
}

// execVia runs cmd in the sandbox through envd's process service at base
// and returns its stdout and exit code.
func execVia(ctx context.Context, hc *http.Client, base string, hdr http.Header, cmd string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c := processconnect.NewProcessClient(hc, base)
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", cmd}}, Stdin: proto.Bool(false)})
	for k, v := range hdr {
		req.Header()[k] = v
	}
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("user:")))
	stream, err := c.Start(ctx, req)
	if err != nil {
		return "", -1, err
	}
	defer stream.Close()
	var out strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
		}
		if end := ev.GetEnd(); end != nil {
			return out.String(), int(end.GetExitCode()), nil
		}
	}
	return out.String(), -1, fmt.Errorf("stream ended without an end event: %w", stream.Err())
}

// TestNodeBinaryRunsc drives the warren binary's `warren node` (real
// gVisor sandboxes, loopback) as `warren api` does: the lifecycle manager
// over the node RPC client creates a sandbox, an edge proxy reaches its
// envd through the node proxy, a command runs, the sandbox is killed. The
// node's credentials are refused when missing or wrong (the node's token
// itself among them), on the RPC and the proxy.
func TestNodeBinaryRunsc(t *testing.T) {
	iss, err := nodeauth.NewIssuer("cmd-warren-test-credential-key-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	token := iss.Token(nodeauth.NewTokenID(), "wnode-test")
	rpcCred, proxyCred := nodeauth.Credential(token, nodeauth.PurposeRPC), nodeauth.Credential(token, nodeauth.PurposeProxy)
	dataDir := startNodeBinary(t, token)
	ctx := context.Background()
	node := nodeclient.New("http://"+nodeRPCAddr, nodeclient.Options{Token: rpcCred})

	for _, tok := range []string{"", "wnode-wrong-token-0000", token, proxyCred} {
		_, err := nodeclient.New("http://"+nodeRPCAddr, nodeclient.Options{Token: tok}).List(ctx)
		if !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("node RPC with token %q: %v, want unauthorized", tok, err)
		}
	}
	caps, err := node.Capabilities(ctx)
	if err != nil || caps.Driver != "runsc" {
		t.Fatalf("capabilities: %+v %v", caps, err)
	}

	// The control plane's side: a store, the lifecycle manager over the
	// node RPC, the edge proxy routing by it.
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "warren.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := apiserver.EnsureDefaultTeam(ctx, st, ""); err != nil {
		t.Fatal(err)
	}
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: node, NodeID: "wnode-test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	edge, err := proxy.New(proxy.Config{Router: lc, NodeHop: func(context.Context, string) (proxy.NodeHop, error) {
		return proxy.NodeHop{Credential: proxyCred}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	es := httptest.NewServer(edge)
	t.Cleanup(es.Close)

	cat, err := templates.New(templates.Config{DataDir: filepath.Join(dataDir, "templates")})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := cat.Resolve(ctx, apiserver.DefaultTeamID, "base")
	if err != nil {
		t.Fatalf("the node's base template: %v", err)
	}
	sb, err := lc.Create(ctx, lifecycle.CreateParams{TeamID: apiserver.DefaultTeamID, Template: tmpl, Timeout: 10 * time.Minute,
		Resources: sandbox.Resources{VCPUs: 1, MemoryMB: 512, DiskMB: 1024}, Secure: true, EnvVars: map[string]string{"WNODE": "on-the-node"}})
	if err != nil {
		t.Fatalf("create through the node RPC: %v", err)
	}
	ns, err := node.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ns.NodeProxy != nodeProxyAddr {
		t.Errorf("the sandbox's node proxy %q, want %q", ns.NodeProxy, nodeProxyAddr)
	}
	envdTok := sb.Spec.EnvdAccessToken

	// Through the edge proxy, as the SDK's traffic goes.
	hdr := http.Header{proxy.HeaderSandboxID: {sb.ID}, proxy.HeaderSandboxPort: {strconv.Itoa(proxy.EnvdPort)}, "X-Access-Token": {envdTok}}
	out, code, err := execVia(ctx, http.DefaultClient, es.URL, hdr, `echo "$WNODE $((6*7))"`)
	if err != nil || code != 0 || out != "on-the-node 42\n" {
		t.Fatalf("exec through the edge and node proxies: %q exit %d %v", out, code, err)
	}
	// Straight to the node proxy: with the token it runs, without or with
	// another it is refused.
	direct := http.Header{"X-Access-Token": {envdTok}}
	out, code, err = execVia(ctx, &http.Client{Transport: hop{token: proxyCred, id: sb.ID, port: proxy.EnvdPort}}, "http://"+nodeProxyAddr, direct, "hostname >/dev/null && echo direct")
	if err != nil || code != 0 || out != "direct\n" {
		t.Errorf("exec through the node proxy with the token: %q exit %d %v", out, code, err)
	}
	for _, tok := range []string{"", proxyCred + "x", token, rpcCred} {
		_, _, err := execVia(ctx, &http.Client{Transport: hop{token: tok, id: sb.ID, port: proxy.EnvdPort}}, "http://"+nodeProxyAddr, direct, "echo no")
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("exec through the node proxy with token %q: %v, want unauthenticated (401)", tok, err)
		}
	}

	if err := lc.Kill(ctx, apiserver.DefaultTeamID, sb.ID, sandbox.KillRequest); err != nil {
		t.Fatalf("kill through the node RPC: %v", err)
	}
	if _, err := node.Get(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the node after the kill: %v, want not found", err)
	}
	resp, err := (&http.Client{Transport: hop{token: proxyCred, id: sb.ID, port: proxy.EnvdPort}}).Get("http://" + nodeProxyAddr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), `"sandboxId":"`+sb.ID+`"`) {
		t.Errorf("node proxy to the killed sandbox: %d %s, want 502 naming it", resp.StatusCode, body)
	}
	if list, err := node.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("the node's sandboxes after the kill: %v %v", list, err)
	}
}
