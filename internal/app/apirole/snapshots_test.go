package apirole

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodebuild/nodebuildtest"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestAPIRoleSnapshotsAndLogs runs warren api over Postgres with one node:
// the agent over the fake driver behind the real node RPC server, its
// sandbox snapshots kept in a catalog of its own as `warren node` keeps
// them. A snapshot through the REST API is taken on the node (not a 501),
// a create naming it restores it there, another team starts it nowhere;
// a sandbox's kept log is read by its node (its address, a fake one, is
// never dialed by the API).
func TestAPIRoleSnapshotsAndLogs(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	const key = "e2b_00112233445566778899aabbccddeeff00112244"
	var nodeToken string // the node's own, issued once the API runs
	ctx, cancel := context.WithCancel(context.Background())
	a, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Driver: fake.New(fake.Config{}), Cgroups: nodetest.NewCgroups(), Net: nodetest.NewNet(),
		Layers: nodetest.NewLayers(), Envd: &nodetest.Envd{}, ReclaimInterval: -1,
		FreeDisk: func(string) (uint64, error) { return 1 << 40, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ss := nodebuildtest.New(t, a, a)
	base := nodeapi.Template{ID: "base", BuildID: "base", RootFS: t.TempDir(), User: "user", Workdir: "/home/user"}
	if err := os.WriteFile(filepath.Join(base.RootFS, "hi"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	resolve := func(ctx context.Context, teamID string, tm nodeapi.Template) (nodeapi.Template, error) {
		if tm.ID == "base" {
			return base, nil // the node's own base
		}
		return ss.Resolve(ctx, teamID, tm)
	}
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(a, noderpc.Options{ResolveTemplate: resolve, SandboxSnapshots: ss}))
	nodeSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The control plane's RPC credential of this node, as noderpc's
		// Options.Token checks it.
		if nodeauth.Bearer(r.Header) != nodeauth.Credential(nodeToken, nodeauth.PurposeRPC) {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(nodeSrv.Close) // after the API's clean-up: it holds the node's watch stream

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
	var api string
	select {
	case a := <-addr:
		api = "http://" + a
	case err := <-done:
		done <- nil
		t.Fatalf("warren api ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("warren api did not start")
	}
	nodeToken = issueNodeToken(t, api, "node-1")
	beat := nodereg.Status{ID: "node-1", RPCAddress: nodeSrv.URL, ProxyAddress: "127.0.0.1:1", BootID: "boot-1", Capacity: store.NodeResources{VCPUs: 16, MemoryMB: 16384}}
	if _, err := (&nodereg.Client{APIURL: api, Token: nodeToken}).Heartbeat(ctx, beat); err != nil {
		t.Fatal(err)
	}
	c := client.New(api, key)
	src, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatal(err)
	}

	// The snapshot is taken on the node and recorded in the API's catalog.
	var snap struct {
		SnapshotID string   `json:"snapshotID"`
		Names      []string `json:"names"`
	}
	if _, code, err := c.Do(ctx, "POST", "/sandboxes/"+src.SandboxID+"/snapshots", map[string]string{"name": "snap"}, &snap); err != nil || code != http.StatusCreated {
		t.Fatalf("snapshot under warren api: %d %v", code, err)
	}
	if snap.SnapshotID != "snap:default" {
		t.Fatalf("snapshot: %+v", snap)
	}
	alias, err := c.TemplateByAlias(ctx, "snap")
	if err != nil {
		t.Fatal(err)
	}
	copyOf, err := c.Create(ctx, client.NewSandbox{TemplateID: snap.SnapshotID})
	if err != nil {
		t.Fatalf("create from the snapshot: %v", err)
	}
	on, err := a.Get(ctx, copyOf.SandboxID)
	if err != nil || on.TemplateID != alias.TemplateID || on.BuildID == base.BuildID {
		t.Fatalf("the sandbox from the snapshot on the node: %+v %v, want one of template %s", on, err, alias.TemplateID)
	}
	var listed []struct {
		SnapshotID string `json:"snapshotID"`
	}
	if _, code, err := c.Do(ctx, "GET", "/snapshots?sandboxID="+src.SandboxID, nil, &listed); err != nil || code != http.StatusOK || len(listed) != 1 {
		t.Fatalf("GET /snapshots: %d %v %+v", code, err, listed)
	}

	// Another team neither starts nor takes it.
	var team struct {
		APIKey string `json:"apiKey"`
	}
	adm := client.New(api, "")
	adm.Header.Set("X-Admin-Token", "adm-0123456789abcdef0123456789abcdef")
	if _, code, err := adm.Do(ctx, "POST", "/admin/teams", map[string]string{"name": "other"}, &team); err != nil || code/100 != 2 {
		t.Fatalf("create a team: %d %v", code, err)
	}
	other := client.New(api, team.APIKey)
	if _, err := other.Create(ctx, client.NewSandbox{TemplateID: snap.SnapshotID}); !client.IsNotFound(err) {
		t.Errorf("another team's create from the snapshot: %v, want 404", err)
	}
	if _, code, _ := other.Do(ctx, "POST", "/sandboxes/"+src.SandboxID+"/snapshots", map[string]string{}, nil); code != http.StatusNotFound {
		t.Errorf("another team's snapshot of the source: %d, want 404", code)
	}

	// The kept log comes from the node.
	var logs client.SandboxLogsV2
	if _, code, err := c.Do(ctx, "GET", "/v2/sandboxes/"+src.SandboxID+"/logs", nil, &logs); err != nil || code != http.StatusOK {
		t.Fatalf("logs: %d %v", code, err)
	}
	var msgs []string
	for _, l := range logs.Logs {
		msgs = append(msgs, l.Message)
	}
	if got := strings.Join(msgs, "|"); !strings.Contains(got, "envd initialized") {
		t.Errorf("logs of a sandbox on a node: %q, want the line its envd keeps", got)
	}
}
