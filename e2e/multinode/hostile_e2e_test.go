//go:build e2e

package multinode

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/api/node/nodepbconnect"
	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/proxy"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// The hostile test's nodes' host objects, apart from every other test's.
var (
	isoH = e2eserve.NewIsolation("mnh", "100.74.0.0/16", "nh")
	isoI = e2eserve.NewIsolation("mni", "100.75.0.0/16", "ni")
)

const hostileAPIAddr = "127.0.0.1:3895"

// TestHostileNode is a compromised node on the real binaries: a
// `warren api` and two `warren node` (real gVisor, TLS, a token each).
// Node A, root on its machine, holds its token and everything derived
// from it. With the control plane's own credential of A, a create over
// the host's root is refused and starts nothing; with what A holds, A
// reaches neither B's RPC nor its proxy, and cannot heartbeat as B; a
// plain-HTTP client gets nothing of a node; a revoked token is refused
// and the node becomes unreachable.
func TestHostileNode(t *testing.T) {
	e2eserve.RunscPrerequisites(t)
	dsn := storetest.PostgresSchema(t)
	base := e2eserve.NodesDir(t, "multinode-hostile-")
	e2eserve.NoRunscLeftUnder(t, base)
	api := e2eserve.StartAPI(t, e2eserve.APIOptions{Name: "warren api", Listen: hostileAPIAddr, DSN: dsn,
		APIKey: apiKey, AdminToken: adminToken, NodeToken: nodeToken, ExtraArgs: e2eserve.ShortLiveness})
	adm := api.Admin
	newNode := func(id, rpc, proxy, dir string, iso e2eserve.Isolation) *e2eserve.Node {
		return e2eserve.NewNode(e2eserve.NodeOptions{ID: id, RPCListen: rpc, ProxyListen: proxy,
			APIURL: "http://" + hostileAPIAddr, DataDir: filepath.Join(base, dir), Isolation: iso})
	}
	a := newNode("mn-h", "127.0.0.1:3896", "127.0.0.1:3897", "h", isoH)
	b := newNode("mn-i", "127.0.0.1:3898", "127.0.0.1:3899", "i", isoI)
	for _, n := range []*e2eserve.Node{a, b} {
		n.Run(t)
	}
	adm.WaitNodes(t, "both nodes ready", 3*time.Minute, func(m map[string]e2eserve.NodeInfo) bool {
		return m["mn-h"].Status == "ready" && m["mn-i"].Status == "ready"
	})
	ctx := context.Background()
	tlsCfg := e2eserve.ClientTLS(t)

	// Item 3: the control plane's own credential of A, a template over the
	// host's root: refused, nothing started.
	rpcCredA := nodeauth.Credential(a.NodeToken, nodeauth.PurposeRPC)
	raw := nodepbconnect.NewNodeServiceClient(nodeauth.Client(tlsCfg), "https://"+a.RPCListen,
		connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+rpcCredA)
				return next(ctx, req)
			}
		})))
	for _, tmpl := range []*nodepb.Template{{Id: "base", Rootfs: "/"}, {Id: "base", BuildId: "base", SnapshotDir: "/etc"}} {
		_, err := raw.Create(ctx, connect.NewRequest(&nodepb.CreateRequest{Id: "hostilesbx1", TeamId: "team", Template: tmpl}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Create over %v: %v, want invalid argument", tmpl, err)
		}
	}
	if list, err := a.Client().List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("node A after the hostile creates: %v %v, want nothing running", list, err)
	}

	// Item 4: what A holds opens nothing of B.
	held := map[string]string{"A's token": a.NodeToken}
	for _, p := range []string{nodeauth.PurposeRPC, nodeauth.PurposeProxy, nodeauth.PurposePull, nodeauth.PurposeMetrics} {
		held["A's "+p+" credential"] = nodeauth.Credential(a.NodeToken, p)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	for name, cred := range held {
		c := nodeclient.New("https://"+b.RPCListen, nodeclient.Options{TLS: tlsCfg, Token: cred})
		if _, err := c.List(ctx); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("B's RPC with %s: %v, want unauthorized", name, err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+b.ProxyListen+"/health", nil)
		req.Header.Set(proxy.HeaderNodeToken, cred)
		req.Header.Set(proxy.HeaderNodeSandboxID, "anysandbox1")
		req.Header.Set(proxy.HeaderNodeSandboxPort, "49983")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("B's proxy: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("B's proxy with %s: %d, want 401", name, resp.StatusCode)
		}
	}
	forged := nodereg.Status{ID: b.ID, RPCAddress: "https://" + a.RPCListen, ProxyAddress: a.ProxyListen, BootID: "forged-boot", Version: "x"}
	if _, err := (&nodereg.Client{APIURL: "http://" + hostileAPIAddr, Token: a.NodeToken}).Heartbeat(ctx, forged); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("A heartbeating as B: %v, want 403", err)
	}
	if n := adm.Nodes(t)[b.ID]; n.BootID == "forged-boot" || n.Status != "ready" {
		t.Errorf("B after A's forged heartbeat: %+v", n)
	}
	// Plain HTTP gets nothing of a node.
	if resp, err := http.Get("http://" + b.RPCListen + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to B's RPC listener: %d, want the TLS listener's 400", resp.StatusCode)
		}
	}

	// A's token revoked: A is refused, and becomes unreachable.
	code, body := e2eserve.Call(t, "GET", adm.URL+"/admin/nodes/"+a.ID+"/tokens", map[string]string{"X-Admin-Token": adm.Token})
	id, _, _ := strings.Cut(strings.TrimPrefix(string(body), `[{"id":"`), `"`)
	if code != http.StatusOK || id == "" {
		t.Fatalf("A's tokens: %d %s", code, body)
	}
	adm.Call(t, "DELETE", "/admin/nodes/"+a.ID+"/tokens/"+id)
	if _, err := (&nodereg.Client{APIURL: "http://" + hostileAPIAddr, Token: a.NodeToken}).Heartbeat(ctx,
		nodereg.Status{ID: a.ID, RPCAddress: "https://" + a.RPCListen, ProxyAddress: a.ProxyListen, BootID: "b", Version: "x"}); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Errorf("a heartbeat with A's revoked token: %v, want unauthorized", err)
	}
	adm.WaitNodes(t, "A unreachable once its token is revoked", 2*time.Minute, func(m map[string]e2eserve.NodeInfo) bool {
		return m[a.ID].Status == "unreachable" || m[a.ID].Status == "lost"
	})
}
