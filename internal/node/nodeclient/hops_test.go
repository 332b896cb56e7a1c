package nodeclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
)

// TestNoRedirects: a node that answers with a redirect is not followed
// (the call's credential would go where it points), even to a real node.
func TestNoRedirects(t *testing.T) {
	t.Parallel()
	r := newRig(t, fake.Config{}, "s3cret")
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, r.url+req.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	c := nodeclient.New(redirector.URL, nodeclient.Options{Token: "s3cret"})
	if _, err := c.List(context.Background()); err == nil {
		t.Error("a redirected List succeeded")
	} else if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a redirected List: %v, want unavailable", err)
	}
	if _, err := c.Watch(t.Context()); err == nil {
		t.Error("a redirected Watch succeeded")
	}
	if list, _ := r.agent.List(context.Background()); len(list) != 0 {
		t.Fatal("the node behind the redirect was reached")
	}
}

// TestNoEnvironmentProxy: the client ignores HTTP_PROXY and HTTPS_PROXY,
// which would see every call's credential (the child process makes a
// call to a node the proxy would take).
func TestNoEnvironmentProxy(t *testing.T) {
	if os.Getenv("NODECLIENT_PROXY_CHILD") == "1" {
		c := nodeclient.New("http://node-a.invalid:3100", nodeclient.Options{Token: "s3cret"})
		_, err := c.List(context.Background())
		if err == nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	t.Parallel()
	var seen atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		http.Error(w, "proxied", http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoEnvironmentProxy$", "-test.count=1")
	cmd.Env = append(os.Environ(), "NODECLIENT_PROXY_CHILD=1", "HTTP_PROXY="+proxy.URL, "HTTPS_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if n := seen.Load(); n != 0 {
		t.Fatalf("the environment's proxy saw %d node calls", n)
	}
}
