package apirole

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
)

// credentialKey is the node credential key of the test APIs.
const credentialKey = "app-test-node-credential-key-0123456789"

// issueNodeToken issues node nodeID's token through the admin API at base.
func issueNodeToken(t *testing.T, base, nodeID string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/admin/nodes/"+nodeID+"/tokens", strings.NewReader(`{}`))
	req.Header.Set("X-Admin-Token", "adm-0123456789abcdef0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out nodereg.IssuedToken
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("issue node %s's token: %d, %v", nodeID, resp.StatusCode, err)
	}
	return out.Token
}

// TestAPIRoleNeedsPostgresAndNodeCredentialKey: warren api refuses SQLite
// (or no database) and a missing or short node credential key with a
// clear error.
func TestAPIRoleNeedsPostgresAndNodeCredentialKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{NodeCredentialKey: credentialKey}, "needs Postgres"},
		{Config{Settings: Settings{DatabaseURL: "/tmp/warren.db"}, NodeCredentialKey: credentialKey}, "needs Postgres"},
		{Config{Settings: Settings{DatabaseURL: "postgres://127.0.0.1:1/x"}}, "node-credential-key"},
		{Config{Settings: Settings{DatabaseURL: "postgres://127.0.0.1:1/x"}, NodeCredentialKey: "short"}, "at least 32"},
		{Config{Settings: Settings{DatabaseURL: "postgres://127.0.0.1:1/x"}, NodeCredentialKey: credentialKey, InsecureLoopbackNodes: true}, "insecure-loopback-nodes"},
	} {
		err := Run(context.Background(), app.Options{Logger: slog.New(slog.DiscardHandler)}, c.cfg)
		if !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// fakeTemplates is the template resolver of a fake node behind the node
// RPC: it holds every template, its files nowhere.
func fakeTemplates(_ context.Context, _ string, t nodeapi.Template) (nodeapi.Template, error) {
	return nodeapi.Template{ID: t.ID, BuildID: t.BuildID, RootFS: "/nonexistent/fake-rootfs", User: "user", Workdir: "/home/user"}, nil
}

// TestAPIRole runs warren api over Postgres with one node: a fake node
// behind the real node RPC server. The node registers with its own
// token, a create through the REST API is placed on it, /admin/nodes
// shows it holding the sandbox, and a kill reaches it.
func TestAPIRole(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	const key = "e2b_00112233445566778899aabbccddeeff00112233"
	fn := fakenode.New()
	var nodeToken string // issued once the API runs
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(fn, noderpc.Options{ResolveTemplate: fakeTemplates}))
	nodeSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if nodeauth.Bearer(r.Header) != nodeauth.Credential(nodeToken, nodeauth.PurposeRPC) {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(nodeSrv.Close) // after the API's clean-up: it holds the node's watch stream

	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, app.Options{Logger: slog.New(slog.DiscardHandler), Out: io.Discard}, Config{NodeCredentialKey: credentialKey,
			Settings: Settings{Listen: "127.0.0.1:0", DatabaseURL: dsn, APIKey: key, AdminToken: "adm-0123456789abcdef0123456789abcdef", Ready: func(a string) { addr <- a }}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("warren api: %v", err)
		}
	})
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		done <- nil // for the clean-up, which waits for the end
		t.Fatalf("warren api ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("warren api did not start")
	}
	c := client.New(base, key)
	if _, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"}); err == nil {
		t.Fatal("a create with no node registered succeeded")
	}
	nodeToken = issueNodeToken(t, base, "node-1")
	beat := nodereg.Status{ID: "node-1", RPCAddress: nodeSrv.URL, ProxyAddress: "127.0.0.1:1", BootID: "boot-1", Capacity: store.NodeResources{VCPUs: 4, MemoryMB: 4096}}
	if _, err := (&nodereg.Client{APIURL: base, Token: "wrong"}).Heartbeat(ctx, beat); !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Fatalf("heartbeat with a wrong token: %v", err)
	}
	if _, err := (&nodereg.Client{APIURL: base, Token: nodeToken}).Heartbeat(ctx, beat); err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fn.Get(ctx, sb.SandboxID); err != nil {
		t.Fatalf("the node does not run the created sandbox: %v", err)
	}
	nodes := adminNodes(t, base)
	if len(nodes) != 1 || nodes[0].ID != "node-1" || nodes[0].Sandboxes != 1 || nodes[0].Allocated.VCPUs == 0 || nodes[0].Status != "ready" {
		t.Fatalf("/admin/nodes: %+v", nodes)
	}
	if ok, err := c.Kill(ctx, sb.SandboxID); err != nil || !ok {
		t.Fatal(err)
	}
	if _, err := fn.Get(ctx, sb.SandboxID); !errdefs.IsNotFound(err) {
		t.Fatalf("the killed sandbox is still on the node: %v", err)
	}
	if nodes := adminNodes(t, base); nodes[0].Sandboxes != 0 || nodes[0].Allocated != (store.NodeResources{}) {
		t.Fatalf("/admin/nodes after the kill: %+v", nodes)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("X-Admin-Token", "adm-0123456789abcdef0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`nodes{status="ready"} 1`, `nodes{status="lost"} 0`, `node_heartbeats_total{result="accepted"} 1`,
		`node_heartbeats_total{result="unauthorized"} 1`, `placement_creates_total{result="placed"} 1`, `placement_creates_total{result="no_node"} 1`} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func adminNodes(t *testing.T, base string) []nodereg.NodeInfo {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/admin/nodes", nil)
	req.Header.Set("X-Admin-Token", "adm-0123456789abcdef0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []nodereg.NodeInfo
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /admin/nodes: %d, %v", resp.StatusCode, err)
	}
	return out
}
