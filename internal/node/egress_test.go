package node_test

import (
	"context"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/egressproxy"
	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// egressNet is an in-memory pool with an egress proxy's CA and log.
type egressNet struct {
	*nodetest.Net
}

func (egressNet) CACert(id string) ([]byte, error) { return []byte("PEM of " + id), nil }

func (egressNet) EgressLog(id string) ([]egressproxy.Entry, error) {
	if id == "never" {
		return nil, errdefs.ErrNotFound
	}
	return []egressproxy.Entry{{Proto: "tcp", Host: "api.example.com", Addr: "198.51.100.1", Port: 443, Allowed: true, Reason: egressproxy.ReasonName, BytesIn: 10}}, nil
}

func transformed(secret string) netslot.Policy {
	return netslot.Policy{Egress: &egressrules.Rules{Hosts: []string{"api.example.com"},
		Transforms: []egressrules.Transform{{Host: "api.example.com", Headers: map[string]string{"Authorization": "Bearer " + secret}}},
		Proxy:      &egressrules.Proxy{Address: "198.51.100.9:1080", Username: "u", Password: "proxy-password"}}}
}

// TestEgressCAAndViews: a sandbox whose rules transform requests gets its
// CA installed through envd, as root, when it is made and when an update
// brings transforms; what the node shows of a sandbox carries no header
// value and no proxy password; its egress log is served.
func TestEgressCAAndViews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, fake.Config{})
	e.tune = func(c *node.Config) { c.Net = egressNet{e.net} }
	a := e.start()
	caRuns := func() int {
		n := 0
		for _, r := range e.envd.Runs() {
			if r.Process.Tag == "warren-egress-ca" {
				if r.Process.User != "root" || r.Process.Envs["WARREN_EGRESS_CA"] == "" {
					t.Errorf("CA install: %+v", r.Process)
				}
				n++
			}
		}
		return n
	}
	e.create(a, "plain")
	e.create(a, "named", func(r *nodeapi.CreateRequest) {
		r.Network = netslot.Policy{Egress: &egressrules.Rules{Hosts: []string{"a.example"}}}
	})
	if n := caRuns(); n != 0 {
		t.Fatalf("a CA was installed in sandboxes whose rules transform nothing: %d", n)
	}
	sb := e.create(a, "secret", func(r *nodeapi.CreateRequest) { r.Network = transformed("sk-TOPSECRET") })
	if n := caRuns(); n != 1 {
		t.Fatalf("CA installs after a create with a transform: %d", n)
	}
	for _, v := range []*nodeapi.Sandbox{sb, mustGet(t, a, "secret")} {
		eg := v.Network.Egress
		if eg == nil || eg.Transforms[0].Headers["Authorization"] != egressrules.Redacted || eg.Proxy.Password != egressrules.Redacted {
			t.Fatalf("the node's view carries values: %+v", eg)
		}
	}
	if got, _ := e.net.Policy("secret"); got.Egress.Transforms[0].Headers["Authorization"] != "Bearer sk-TOPSECRET" {
		t.Fatalf("the slot did not get the value: %+v", got.Egress)
	}
	if err := a.UpdateNetwork(ctx, "plain", transformed("sk-2")); err != nil {
		t.Fatal(err)
	}
	if n := caRuns(); n != 2 {
		t.Fatalf("CA installs after an update bringing a transform: %d", n)
	}
	log, err := a.EgressLog(ctx, "secret")
	if err != nil || len(log) != 1 || log[0].Host != "api.example.com" || !log[0].Allowed {
		t.Fatalf("egress log: %+v, %v", log, err)
	}
	if _, err := a.EgressLog(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Fatalf("egress log of an unknown sandbox: %v", err)
	}
}

// TestEgressTransformNeedsProxy: a node without an egress proxy refuses
// rules that transform requests rather than run the sandbox without them.
func TestEgressTransformNeedsProxy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	req := createReq("sb")
	req.Network = transformed("x")
	if _, err := a.Create(context.Background(), req); !errdefs.IsUnsupported(err) {
		t.Fatalf("create with a transform on a node without a proxy: %v", err)
	}
}

func mustGet(t *testing.T, a *node.Agent, id string) *nodeapi.Sandbox {
	t.Helper()
	sb, err := a.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}
