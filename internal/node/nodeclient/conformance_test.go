package nodeclient_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeapi/nodeapitest"
)

// TestConformance runs the node contract's suite against the RPC client,
// through the noderpc server, to an agent over the fake driver: what
// crosses the wire must come back as the agent gave it.
func TestConformance(t *testing.T) {
	nodeapitest.Run(t, nodeapitest.Harness{New: func(t *testing.T) nodeapitest.Node {
		r := newRig(t, fake.Config{}, "conformance-token")
		return nodeapitest.Node{
			Service:  r.client,
			Template: nodeapi.Template{ID: "t", BuildID: "b", RootFS: "/rootfs", User: "user", Workdir: "/home/user"},
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
