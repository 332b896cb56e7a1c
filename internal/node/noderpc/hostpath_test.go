package noderpc_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/api/node/nodepbconnect"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// hostile is a node served over RPC to a caller that holds the node's
// credential and names host paths in its requests.
type hostile struct {
	agent   *node.Agent
	rpc     nodepbconnect.NodeServiceClient
	dataDir string
	// own is the node's template "t", build "b", as it resolves it.
	own nodeapi.Template
}

const hostileToken = "hostile-caller-token"

func newHostile(t *testing.T) *hostile {
	t.Helper()
	dataDir := t.TempDir()
	a, err := node.New(context.Background(), node.Config{
		DataDir: dataDir, Driver: fake.New(fake.Config{}), Cgroups: nodetest.NewCgroups(), Net: nodetest.NewNet(),
		Layers: nodetest.NewLayers(), Envd: &nodetest.Envd{}, ReclaimInterval: -1,
		FreeDisk: func(string) (uint64, error) { return 1 << 40, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	own := nodeapi.Template{ID: "t", BuildID: "b", RootFS: filepath.Join(dataDir, "builds", "b", "rootfs"), User: "user", Workdir: "/home/user"}
	resolve := func(_ context.Context, _ string, t nodeapi.Template) (nodeapi.Template, error) {
		if t.ID != own.ID || (t.BuildID != "" && t.BuildID != own.BuildID) {
			return nodeapi.Template{}, errdefs.ErrNotFound
		}
		return own, nil
	}
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(a, noderpc.Options{Token: hostileToken, ResolveTemplate: resolve}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	bearer := connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+hostileToken)
			return next(ctx, req)
		}
	}))
	return &hostile{agent: a, rpc: nodepbconnect.NewNodeServiceClient(srv.Client(), srv.URL, bearer), dataDir: dataDir, own: own}
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("%s: %v, want invalid argument (no host path crosses the wire)", what, err)
	}
}

// TestCreateTakesNoHostPath is a control plane (or a node acting as one) sending a host path: a
// create naming the host's root as the template's root filesystem (or a
// host directory as its snapshot) started a sandbox over it. The node
// refuses any path and starts only from the template it resolves itself.
func TestCreateTakesNoHostPath(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	ctx := t.Context()
	for name, tmpl := range map[string]*nodepb.Template{
		"rootfs":       {Id: "t", Rootfs: "/"},
		"rootfs+build": {Id: "t", BuildId: "b", Rootfs: "/"},
		"snapshot dir": {Id: "t", BuildId: "b", SnapshotDir: "/etc"},
	} {
		_, err := h.rpc.Create(ctx, connect.NewRequest(&nodepb.CreateRequest{Id: "sb-" + map[string]string{"rootfs": "a", "rootfs+build": "b", "snapshot dir": "c"}[name], TeamId: "team", Template: tmpl}))
		wantInvalid(t, "Create with "+name, err)
	}
	if list, _ := h.agent.List(ctx); len(list) != 0 {
		t.Fatalf("the node runs %d sandboxes after creates naming host paths", len(list))
	}
	// Named by ID and build, the node starts its own copy.
	if _, err := h.rpc.Create(ctx, connect.NewRequest(&nodepb.CreateRequest{Id: "sb-own", TeamId: "team", Template: &nodepb.Template{Id: "t", BuildId: "b"}})); err != nil {
		t.Fatalf("Create by ID: %v", err)
	}
	uses, err := h.agent.TemplatesInUse(ctx)
	if err != nil || len(uses) != 1 || uses[0].RootFS != h.own.RootFS {
		t.Fatalf("the sandbox uses %+v (%v), want the node's own root filesystem %s", uses, err, h.own.RootFS)
	}
}

// TestPoolsTakeNoHostPath: a pool's template is the node's own too.
func TestPoolsTakeNoHostPath(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	ctx := t.Context()
	_, err := h.rpc.SetPool(ctx, connect.NewRequest(&nodepb.SetPoolRequest{Template: &nodepb.Template{Id: "t", Rootfs: "/"}, Size: 1}))
	wantInvalid(t, "SetPool with a root filesystem", err)
	_, err = h.rpc.SetPool(ctx, connect.NewRequest(&nodepb.SetPoolRequest{Template: &nodepb.Template{Id: "t", SnapshotDir: "/etc"}, Size: 1}))
	wantInvalid(t, "SetPool with a snapshot dir", err)
	if pools, _ := h.rpc.Pools(ctx, connect.NewRequest(&nodepb.PoolsRequest{})); len(pools.Msg.GetPools()) != 0 {
		t.Fatalf("pools after SetPool naming host paths: %v", pools.Msg.GetPools())
	}
	_, err = h.rpc.Reserve(ctx, connect.NewRequest(&nodepb.ReserveRequest{Template: &nodepb.Template{Id: "t", BuildId: "b2", Rootfs: "/"}}))
	wantInvalid(t, "Reserve with a root filesystem", err)
	if _, err := h.rpc.SetPool(ctx, connect.NewRequest(&nodepb.SetPoolRequest{Template: &nodepb.Template{Id: "t", BuildId: "b"}, Size: 1})); err != nil {
		t.Fatalf("SetPool by ID: %v", err)
	}
}

// TestSnapshotsTakeNoHostPath: the snapshot calls named a directory on
// the node (any under its data directory: a template's files among them);
// they are refused over the wire.
func TestSnapshotsTakeNoHostPath(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	ctx := t.Context()
	if _, err := h.rpc.Create(ctx, connect.NewRequest(&nodepb.CreateRequest{Id: "sb1", TeamId: "team", Template: &nodepb.Template{Id: "t", BuildId: "b"}})); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(h.dataDir, "builds", "b", "snapshot")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := h.rpc.SnapshotSandbox(ctx, connect.NewRequest(&nodepb.SnapshotSandboxRequest{Id: "sb1", Dir: filepath.Join(h.dataDir, "x")}))
	wantInvalid(t, "SnapshotSandbox into a directory", err)
	_, err = h.rpc.SnapshotTemplate(ctx, connect.NewRequest(&nodepb.SnapshotTemplateRequest{
		Template: &nodepb.Template{Id: "t", Rootfs: "/"}, ReadyCmd: "true", Dir: filepath.Join(h.dataDir, "y")}))
	wantInvalid(t, "SnapshotTemplate over the host's root", err)
	_, err = h.rpc.DeleteSnapshot(ctx, connect.NewRequest(&nodepb.DeleteSnapshotRequest{Dir: victim}))
	wantInvalid(t, "DeleteSnapshot of a template's directory", err)
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("the template's snapshot directory: %v", err)
	}
	for _, d := range []string{"x", "y"} {
		if _, err := os.Stat(filepath.Join(h.dataDir, d)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s written on the node: %v", d, err)
		}
	}
}

// TestTemplatesInUseNamesNoHostPath: what the node answers names builds,
// not where their files lie.
func TestTemplatesInUseNamesNoHostPath(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	ctx := t.Context()
	if _, err := h.rpc.Create(ctx, connect.NewRequest(&nodepb.CreateRequest{Id: "sb1", TeamId: "team", Template: &nodepb.Template{Id: "t", BuildId: "b"}})); err != nil {
		t.Fatal(err)
	}
	resp, err := h.rpc.TemplatesInUse(ctx, connect.NewRequest(&nodepb.TemplatesInUseRequest{}))
	if err != nil || len(resp.Msg.GetTemplates()) != 1 {
		t.Fatalf("TemplatesInUse: %v, %v", resp, err)
	}
	u := resp.Msg.GetTemplates()[0]
	if u.GetBuildId() != "b" || u.GetSandboxId() != "sb1" || u.GetRootfs() != "" || u.GetSnapshotDir() != "" {
		t.Errorf("TemplatesInUse answered %v: want build and sandbox, no path", u)
	}
}
