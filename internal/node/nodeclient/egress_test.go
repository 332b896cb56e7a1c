package nodeclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/egressproxy"
	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodeclient"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// egressNet is an in-memory pool with an egress proxy's CA and log, as
// the node's egressproxy.Pool has.
type egressNet struct{ *nodetest.Net }

func (egressNet) CACert(id string) ([]byte, error) { return []byte("PEM of " + id), nil }

func (egressNet) EgressLog(id string) ([]egressproxy.Entry, error) {
	if id != "sb" {
		return nil, errdefs.ErrNotFound
	}
	return []egressproxy.Entry{{Proto: "tcp", Host: "api.example.com", Addr: "198.51.100.1", Port: 443, Allowed: true,
		Reason: egressproxy.ReasonName, BytesOut: 7, BytesIn: 10}}, nil
}

// TestEgressOverTheWire: a create and a network update carry the egress
// rules with their values to the node over the RPC, whose slot gets them
// whole; every answer back (the create's, Get, List) has them redacted;
// the egress log comes over the wire, and an unknown sandbox's is
// not_found there too.
func TestEgressOverTheWire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const token = "egress-wire-token"
	net := nodetest.NewNet()
	a, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Driver: fake.New(fake.Config{}), Cgroups: nodetest.NewCgroups(), Net: egressNet{net},
		Layers: nodetest.NewLayers(), Envd: &nodetest.Envd{}, ReclaimInterval: -1,
		FreeDisk: func(string) (uint64, error) { return 1 << 40, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	mux := http.NewServeMux()
	mux.Handle(noderpc.NewHandler(a, noderpc.Options{Token: token, ResolveTemplate: resolveOwn}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := nodeclient.New(srv.URL, nodeclient.Options{HTTPClient: srv.Client(), Token: token})

	policy := func(secret, password string) sandbox.NetworkPolicy {
		return sandbox.NetworkPolicy{Egress: &egressrules.Rules{Hosts: []string{"api.example.com"},
			Transforms: []egressrules.Transform{{Host: "api.example.com", Headers: map[string]string{"Authorization": "Bearer " + secret}}},
			Proxy:      &egressrules.Proxy{Address: "198.51.100.9:1080", Username: "u", Password: password}}}
	}
	r := req("sb")
	r.Network = policy("sk-over-the-wire", "socks-pass")
	created, err := c.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := net.Policy("sb")
	if !ok || got.Egress == nil || got.Egress.Transforms[0].Headers["Authorization"] != "Bearer sk-over-the-wire" || got.Egress.Proxy.Password != "socks-pass" {
		t.Fatalf("the node's slot did not get the values: %+v", got.Egress)
	}
	listed, err := c.List(ctx)
	if err != nil || len(listed) != 1 {
		t.Fatalf("list: %v, %v", listed, err)
	}
	fetched, err := c.Get(ctx, "sb")
	if err != nil {
		t.Fatal(err)
	}
	for what, eg := range map[string]*egressrules.Rules{"create": created.Network.Egress, "get": fetched.Network.Egress, "list": listed[0].Network.Egress} {
		if eg == nil || len(eg.Hosts) != 1 || eg.Transforms[0].Headers["Authorization"] != egressrules.Redacted || eg.Proxy.Password != egressrules.Redacted || eg.Proxy.Username != "u" {
			t.Errorf("%s's answer: %+v", what, eg)
		}
	}

	if err := c.UpdateNetwork(ctx, "sb", policy("sk-updated", "socks-pass-2")); err != nil {
		t.Fatal(err)
	}
	if got, _ := net.Policy("sb"); got.Egress.Transforms[0].Headers["Authorization"] != "Bearer sk-updated" || got.Egress.Proxy.Password != "socks-pass-2" {
		t.Fatalf("the update did not reach the slot: %+v", got.Egress)
	}
	if fetched, err := c.Get(ctx, "sb"); err != nil || strings.Contains(fetched.Network.Egress.Transforms[0].Headers["Authorization"], "sk-") {
		t.Fatalf("get after the update: %+v, %v", fetched, err)
	}

	log, err := c.EgressLog(ctx, "sb")
	if err != nil || len(log) != 1 || log[0].Host != "api.example.com" || log[0].Port != 443 || !log[0].Allowed ||
		log[0].Reason != egressproxy.ReasonName || log[0].BytesOut != 7 || log[0].BytesIn != 10 {
		t.Fatalf("egress log over the wire: %+v, %v", log, err)
	}
	if _, err := c.EgressLog(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Fatalf("egress log of an unknown sandbox: %v, want not found", err)
	}
}
