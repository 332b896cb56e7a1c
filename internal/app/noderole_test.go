package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// TestNodeTokenRules: a node listening beyond loopback needs a node token
// of some length; on loopback it may go without.
func TestNodeTokenRules(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name, rpc, proxy, token string
	}{
		{"rpc on every interface", "0.0.0.0:0", "127.0.0.1:0", ""},
		{"proxy on every interface", "127.0.0.1:0", ":0", ""},
		{"a host name", "node1.example:0", "127.0.0.1:0", ""},
		{"a short token", "0.0.0.0:0", "0.0.0.0:0", "short"},
	} {
		err := RunNode(context.Background(), NodeConfig{Config: Config{Driver: "fake", DataDir: t.TempDir(), Logger: quiet, Out: io.Discard},
			RPCListen: c.rpc, ProxyListen: c.proxy, NodeToken: c.token})
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "token") {
			t.Errorf("%s: %v, want a refusal naming the token", c.name, err)
		}
	}
}

// startNode runs `warren node` over the fake driver on loopback.
func startNode(t *testing.T, cfg NodeConfig) (rpc, px string) {
	t.Helper()
	cfg.Driver, cfg.DataDir = "fake", t.TempDir()
	cfg.Logger, cfg.Out = slog.New(slog.DiscardHandler), io.Discard
	cfg.RPCListen, cfg.ProxyListen = "127.0.0.1:0", "127.0.0.1:0"
	type addrs struct{ rpc, px string }
	ready := make(chan addrs, 1)
	cfg.Listening = func(rpc, px string) { ready <- addrs{rpc, px} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunNode(ctx, cfg) }()
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
// behind the node token; sandboxes name the advertised proxy address.
func TestNodeRole(t *testing.T) {
	const token = "node-role-token-0123456789"
	rpc, px := startNode(t, NodeConfig{NodeToken: token, NodeID: "n1", Advertise: "node1.internal"})
	ctx := context.Background()
	c := nodeclient.New("http://"+rpc, nodeclient.Options{Token: token})
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
	for _, tok := range []string{"", "wrong-token-0123456789"} {
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
	if got := status("http://"+rpc+"/metrics", map[string]string{"Authorization": "Bearer " + token}); got != 200 {
		t.Errorf("GET /metrics with the token: %d", got)
	}
	hop := map[string]string{proxy.HeaderNodeSandboxID: "sbxrole1", proxy.HeaderNodeSandboxPort: "49983"}
	if got := status("http://"+px+"/health", hop); got != 401 {
		t.Errorf("node proxy without the token: %d, want 401", got)
	}
	hop[proxy.HeaderNodeSandboxID], hop[proxy.HeaderNodeToken] = "sbxother", token
	if got := status("http://"+px+"/health", hop); got != 502 {
		t.Errorf("node proxy, unknown sandbox: %d, want 502", got)
	}
}
