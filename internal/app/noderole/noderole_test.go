package noderole

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// credentialKey is the node credential key of the tests' tokens.
const credentialKey = "app-test-node-credential-key-0123456789"

// testToken is a token of node nodeID, as warren api issues it.
func testToken(t *testing.T, nodeID string) string {
	t.Helper()
	iss, err := nodeauth.NewIssuer(credentialKey)
	if err != nil {
		t.Fatal(err)
	}
	return iss.Token(nodeauth.NewTokenID(), nodeID)
}

// TestNodeIdentityRules: a node needs its own token, unless it runs with
// --insecure-loopback on loopback; off loopback it serves TLS.
func TestNodeIdentityRules(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	tok := testToken(t, "n1")
	for _, c := range []struct {
		name, rpc, proxy, token string
		insecure                bool
		want                    string
	}{
		{"no token on loopback", "127.0.0.1:0", "127.0.0.1:0", "", false, "token"},
		{"insecure off loopback: rpc", "0.0.0.0:0", "127.0.0.1:0", "", true, "loopback"},
		{"insecure off loopback: proxy", "127.0.0.1:0", ":0", "", true, "loopback"},
		{"insecure off loopback: a host name", "node1.example:0", "127.0.0.1:0", "", true, "loopback"},
		{"the old shared kind of token", "127.0.0.1:0", "127.0.0.1:0", "node-secret-0123456789", false, "token"},
		{"no TLS off loopback", "0.0.0.0:0", "0.0.0.0:0", tok, false, "tls"},
	} {
		err := Run(context.Background(), app.Options{Logger: quiet, Out: io.Discard}, Config{Host: Host{Driver: "fake", DataDir: t.TempDir()},
			RPCListen: c.rpc, ProxyListen: c.proxy, NodeToken: c.token, InsecureLoopback: c.insecure, NodeID: "n1"})
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal naming %q", c.name, err, c.want)
		}
	}
}

// startNode runs `warren node` over the fake driver on loopback.
func startNode(t *testing.T, cfg Config) (rpc, px string) {
	t.Helper()
	cfg.Driver, cfg.DataDir = "fake", t.TempDir()
	cfg.RPCListen, cfg.ProxyListen = "127.0.0.1:0", "127.0.0.1:0"
	type addrs struct{ rpc, px string }
	ready := make(chan addrs, 1)
	cfg.Listening = func(rpc, px string) { ready <- addrs{rpc, px} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, app.Options{Logger: slog.New(slog.DiscardHandler), Out: io.Discard}, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	})
	select {
	case a := <-ready:
		return a.rpc, a.px
	case err := <-done:
		t.Fatalf("node: %v", err)
	}
	return "", ""
}

// TestNodeRole: `warren node` serves the node RPC and its proxy, both
// behind the credentials derived from its token (each for its own hop);
// sandboxes name the advertised proxy address.
func TestNodeRole(t *testing.T) {
	token := testToken(t, "n1")
	rpcCred, proxyCred := nodeauth.Credential(token, nodeauth.PurposeRPC), nodeauth.Credential(token, nodeauth.PurposeProxy)
	rpc, px := startNode(t, Config{NodeToken: token, NodeID: "n1", Advertise: "node1.internal"})
	ctx := context.Background()
	c := nodeclient.New("http://"+rpc, nodeclient.Options{Token: rpcCred})
	sb, err := c.Create(ctx, nodeapi.CreateRequest{ID: "sbxrole1", ExecutionID: "e1",
		Template:  nodeapi.Template{ID: "base", BuildID: "base", RootFS: "/nonexistent/fake-rootfs"},
		Resources: sandbox.Resources{VCPUs: 1, MemoryMB: 256}, EndAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(px, ":")
	if want := "node1.internal:" + port; sb.NodeProxy != want {
		t.Errorf("node proxy %q, want %q", sb.NodeProxy, want)
	}
	for _, tok := range []string{"", "wrong-token-0123456789", token, proxyCred} {
		_, err := nodeclient.New("http://"+rpc, nodeclient.Options{Token: tok}).Get(ctx, "sbxrole1")
		if !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("RPC with token %q: %v, want unauthorized", tok, err)
		}
	}
	status := func(url string, hdr map[string]string) int {
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("http://"+rpc+"/healthz", nil); got != 200 {
		t.Errorf("GET /healthz: %d", got)
	}
	if got := status("http://"+rpc+"/metrics", nil); got != 401 {
		t.Errorf("GET /metrics without the token: %d, want 401", got)
	}
	for _, cred := range []string{rpcCred, nodeauth.Credential(token, nodeauth.PurposeMetrics)} {
		if got := status("http://"+rpc+"/metrics", map[string]string{"Authorization": "Bearer " + cred}); got != 200 {
			t.Errorf("GET /metrics with a credential: %d", got)
		}
	}
	if got := status("http://"+rpc+"/metrics", map[string]string{"Authorization": "Bearer " + token}); got != 401 {
		t.Errorf("GET /metrics with the node's token itself: %d, want 401", got)
	}
	hop := map[string]string{proxy.HeaderNodeSandboxID: "sbxrole1", proxy.HeaderNodeSandboxPort: "49983"}
	for _, cred := range []string{"", token, rpcCred} {
		hop[proxy.HeaderNodeToken] = cred
		if got := status("http://"+px+"/health", hop); got != 401 {
			t.Errorf("node proxy with %q: %d, want 401", cred, got)
		}
	}
	hop[proxy.HeaderNodeSandboxID], hop[proxy.HeaderNodeToken] = "sbxother", proxyCred
	if got := status("http://"+px+"/health", hop); got != 502 {
		t.Errorf("node proxy, unknown sandbox: %d, want 502", got)
	}
}

// TestNodesAreApart is a compromised node's third attack: node A, with
// everything it holds (its token and what derives from it), reaches
// neither node B's RPC nor its proxy; the control plane's credentials of
// B do.
func TestNodesAreApart(t *testing.T) {
	tokA, tokB := testToken(t, "node-a"), testToken(t, "node-b")
	rpcB, pxB := startNode(t, Config{NodeToken: tokB, NodeID: "node-b"})
	ctx := context.Background()
	held := map[string]string{"A's token": tokA}
	for _, p := range []string{nodeauth.PurposeRPC, nodeauth.PurposeProxy, nodeauth.PurposePull, nodeauth.PurposeMetrics} {
		held["A's "+p+" credential"] = nodeauth.Credential(tokA, p)
	}
	for name, cred := range held {
		if _, err := nodeclient.New("http://"+rpcB, nodeclient.Options{Token: cred}).List(ctx); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("B's RPC with %s: %v, want unauthorized", name, err)
		}
		req, _ := http.NewRequest("GET", "http://"+pxB+"/health", nil)
		req.Header.Set(proxy.HeaderNodeToken, cred)
		req.Header.Set(proxy.HeaderNodeSandboxID, "sbxanyone")
		req.Header.Set(proxy.HeaderNodeSandboxPort, "49983")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("B's proxy with %s: %d, want 401", name, resp.StatusCode)
		}
	}
	if _, err := nodeclient.New("http://"+rpcB, nodeclient.Options{Token: nodeauth.Credential(tokB, nodeauth.PurposeRPC)}).List(ctx); err != nil {
		t.Errorf("B's RPC with the control plane's credential of B: %v", err)
	}
}

// TestNodeServesTLS: with a certificate the node's RPC and proxy
// listeners speak TLS only (a plain-HTTP client gets nothing of them), a
// client that does not trust the node's CA is refused, and the node
// registers its RPC address as https.
func TestNodeServesTLS(t *testing.T) {
	ctx := context.Background()
	st := storetest.SQLite(t)
	creds, err := nodereg.NewCredentials(st, credentialKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := creds.Issue(ctx, "n-tls", "")
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(nodereg.NewRegistry(st, nil, nil).Handler(creds))
	t.Cleanup(api.Close)
	cert, key := e2eserve.IssueCert(t, t.TempDir(), "127.0.0.1")
	rpc, px := startNode(t, Config{NodeToken: token, NodeID: "n-tls", TLSCert: cert, TLSKey: key, APIURL: api.URL})
	rpcCred := nodeauth.Credential(token, nodeauth.PurposeRPC)

	plain := nodeclient.New("http://"+rpc, nodeclient.Options{Token: rpcCred})
	if _, err := plain.List(ctx); err == nil {
		t.Error("a plain-HTTP client listed the node's sandboxes")
	}
	for _, addr := range []string{rpc, px} {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(body), "ok") {
				t.Errorf("plain HTTP to %s: %d %q, want the TLS listener's 400", addr, resp.StatusCode, body)
			}
		}
	}
	if _, err := nodeclient.New("https://"+rpc, nodeclient.Options{Token: rpcCred}).List(ctx); err == nil {
		t.Error("a client that does not trust the node's CA listed its sandboxes")
	}
	good := nodeclient.New("https://"+rpc, nodeclient.Options{Token: rpcCred, TLS: e2eserve.ClientTLS(t)})
	if _, err := good.List(ctx); err != nil {
		t.Fatalf("over TLS with the CA: %v", err)
	}
	var n *store.Node
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if n, err = st.GetNode(ctx, "n-tls"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not register: %v", err)
		}
	}
	if n.RPCAddress != "https://"+rpc {
		t.Errorf("registered RPC address %q, want https://%s", n.RPCAddress, rpc)
	}
}
