package nodeclient_test

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

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
)

// TestServerOptions: a node with a proxy listener names it in every
// sandbox it returns, and refuses snapshot directories outside its
// SnapshotRoot (the control plane cannot make it write or delete there).
func TestServerOptions(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.Config{}, "")
	root := t.TempDir()
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(r.agent, noderpc.Options{NodeProxy: "10.0.0.5:3101", SnapshotRoot: root}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := nodeclient.New(srv.URL, nodeclient.Options{HTTPClient: srv.Client()})
	ctx := context.Background()

	sb, err := c.Create(ctx, req("sb1"))
	if err != nil {
		t.Fatal(err)
	}
	if sb.NodeProxy != "10.0.0.5:3101" {
		t.Errorf("Create: node proxy %q", sb.NodeProxy)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 || list[0].NodeProxy != "10.0.0.5:3101" {
		t.Errorf("List: %+v %v, want the one sandbox with its node proxy", list, err)
	}
	if g, _ := r.client.Get(ctx, "sb1"); g == nil || g.NodeProxy != "" {
		t.Errorf("Get through a server without a proxy: %+v, want no node proxy", g)
	}
	for _, dir := range []string{"/etc", filepath.Join(root, "..", "x"), root, "relative/dir", filepath.Dir(root) + "/other"} {
		if err := c.DeleteSnapshot(ctx, dir); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("DeleteSnapshot of %q: %v, want invalid", dir, err)
		}
	}
	// A sandbox snapshot into a directory the caller names is no longer
	// taken, even under the root: TakeSandboxSnapshot names build IDs.
	raw := nodepbconnect.NewNodeServiceClient(srv.Client(), srv.URL)
	for _, dir := range []string{"/etc", filepath.Join(root, "snap")} {
		_, err := raw.SnapshotSandbox(ctx, connect.NewRequest(&nodepb.SnapshotSandboxRequest{Id: "sb1", Dir: dir}))
		if connect.CodeOf(err) != connect.CodeUnimplemented {
			t.Errorf("SnapshotSandbox into %q: %v, want unimplemented", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "snap")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused snapshot wrote %s: %v", filepath.Join(root, "snap"), err)
	}
}

// The client stands in for the agent wherever the control plane takes a
// node's template snapshots.
var _ builder.Snapshotter = (*nodeclient.Client)(nil)
