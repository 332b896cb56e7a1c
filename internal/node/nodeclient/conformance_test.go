package nodeclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeapi/nodeapitest"
	"github.com/warren-sandbox/warren/internal/nodebuild/nodebuildtest"
)

// rootfsDir is a template's root filesystem tree for the suite (a
// snapshot's artifact is a tar of it).
func rootfsDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hi"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestConformance runs the node contract's suite against the RPC client,
// through the noderpc server, to an agent over the fake driver: what
// crosses the wire must come back as the agent gave it.
// The server keeps sandbox snapshots in a catalog of its own and
// resolves the creates that name them, as `warren node` does.
func TestConformance(t *testing.T) {
	nodeapitest.Run(t, nodeapitest.Harness{New: func(t *testing.T) nodeapitest.Node {
		own := nodeapi.Template{ID: "t", BuildID: "b", RootFS: rootfsDir(t), User: "user", Workdir: "/home/user"}
		r := newRig(t, fake.Config{}, "conformance-token", func(a *node.Agent, o *noderpc.Options) {
			ss := nodebuildtest.New(t, a, a)
			o.SandboxSnapshots = ss
			// The suite's template is the node's own copy; the snapshots'
			// builds are its catalog's.
			o.ResolveTemplate = func(ctx context.Context, teamID string, t nodeapi.Template) (nodeapi.Template, error) {
				if t.ID == own.ID && (t.BuildID == "" || t.BuildID == own.BuildID) {
					return own, nil
				}
				return ss.Resolve(ctx, teamID, t)
			}
		})
		return nodeapitest.Node{
			Service:  r.client,
			Template: own,
			Remote:   true,
			Exit: func(t *testing.T, id string) {
				if err := r.drv.Exit(id, 0); err != nil {
					t.Fatalf("exit %q: %v", id, err)
				}
			},
		}
	}})
}

// TestMetricsUnsupported: a node that keeps no samples answers the
// client's Metrics with ErrUnsupported, not an empty history.
func TestMetricsUnsupported(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(fakenode.New(), noderpc.Options{}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := nodeclient.New(srv.URL, nodeclient.Options{HTTPClient: srv.Client()})
	_, err := c.Metrics(t.Context(), "sb1", time.Time{}, time.Time{})
	if !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("Metrics of a node without samples: %v, want ErrUnsupported", err)
	}
}
