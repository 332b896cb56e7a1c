package nodeclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
)

// TestServerOptions: a node with a proxy listener names it in every
// sandbox it returns.
func TestServerOptions(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.Config{}, "")
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(r.agent, noderpc.Options{NodeProxy: "10.0.0.5:3101", ResolveTemplate: resolveOwn}))
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
}

// A node without a template resolver starts nothing over the wire: the
// request names no files, and it has none to name.
func TestCreateWithoutResolver(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.Config{}, "")
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(r.agent, noderpc.Options{}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := nodeclient.New(srv.URL, nodeclient.Options{HTTPClient: srv.Client()})
	if _, err := c.Create(context.Background(), req("sb1")); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("Create on a node without a resolver: %v, want unsupported", err)
	}
}
