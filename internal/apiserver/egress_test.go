package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestNetworkRulesToNode: E2B's network object becomes the node's policy:
// allowOut's domains and CIDRs apart, rules' keys lower-cased with the
// team's secrets filled in, the SOCKS5 proxy with its credentials. What
// the API keeps and shows is the document with placeholders and without
// the proxy's password; no answer, event or log line carries a value.
func TestNetworkRulesToNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const proxyPassword = "proxy-pass-0987654321"
	if r := e.do("POST", "/secrets", e.key1, `{"name":"openai","value":"`+secretValue+`"}`); r.status != 201 {
		t.Fatalf("secret: %d %s", r.status, r.body)
	}
	body := `{"templateID":"base","network":{
		"allowOut":["API.example.com","*.cdn.example","8.8.8.8"],
		"denyOut":["0.0.0.0/0"],
		"rules":{"API.example.com":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.openai}","X-Org":"acme"}}},{"transform":{"headers":{"X-Org":"later"}}}]},
		"egressProxy":{"address":"proxy.example:1080","username":"u","password":"` + proxyPassword + `"}}}`
	r := e.do("POST", "/v2/sandboxes", e.key1, body)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sb client.Sandbox
	json.Unmarshal(r.body, &sb)
	ns, err := e.node.Get(ctx, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	pol := ns.Network
	want := &egressrules.Rules{
		Hosts:      []string{"api.example.com", "*.cdn.example"},
		Transforms: []egressrules.Transform{{Host: "api.example.com", Headers: map[string]string{"Authorization": "Bearer " + secretValue, "X-Org": "later"}}},
		Proxy:      &egressrules.Proxy{Address: "proxy.example:1080", Username: "u", Password: proxyPassword},
	}
	if !pol.Egress.Equal(want) || len(pol.AllowOut) != 1 || pol.AllowOut[0].String() != "8.8.8.8/32" || len(pol.DenyOut) != 1 || pol.Internet != true {
		t.Fatalf("node policy: %+v egress %+v", pol, pol.Egress)
	}
	info := e.do("GET", "/sandboxes/"+sb.SandboxID, e.key1, "")
	var d client.SandboxDetail
	json.Unmarshal(info.body, &d)
	if d.Network == nil || string(d.Network.EgressProxy) != `{"address":"proxy.example:1080","username":"u"}` || !strings.Contains(string(d.Network.Rules["api.example.com"]), "${e2b.secrets.openai}") {
		t.Fatalf("getInfo network: %s", info.body)
	}

	// An update replaces the whole configuration: no proxy, no rules, no
	// domains are left when it names none.
	if r := e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", e.key1, `{"allowOut":["other.example"],"rules":{"other.example":[{"transform":{"headers":{"K":"${e2b.secrets.OPENAI}"}}}]}}`); r.status != 204 {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	ns, _ = e.node.Get(ctx, sb.SandboxID)
	if e := ns.Network.Egress; e == nil || len(e.Hosts) != 1 || e.Hosts[0] != "other.example" || e.Proxy != nil || e.Transforms[0].Headers["K"] != secretValue {
		t.Fatalf("updated policy: %+v", ns.Network.Egress)
	}
	if r := e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", e.key1, `{"allowOut":["1.1.1.1"]}`); r.status != 204 {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	ns, _ = e.node.Get(ctx, sb.SandboxID)
	if ns.Network.Egress != nil {
		t.Fatalf("an update with CIDRs only keeps egress rules: %+v", ns.Network.Egress)
	}
	info2 := e.do("GET", "/sandboxes/"+sb.SandboxID, e.key1, "")
	events := e.do("GET", "/events/sandboxes/"+sb.SandboxID, e.key1, "")
	for _, out := range []string{string(r.body), string(info.body), string(info2.body), string(events.body), e.logs.String()} {
		if strings.Contains(out, secretValue) || strings.Contains(out, proxyPassword) {
			t.Fatalf("a value leaked: %s", out)
		}
	}
	// Another team's secret of the same name is not the team's.
	if r := e.do("POST", "/v2/sandboxes", e.key2, `{"templateID":"base","network":{"rules":{"a.example":[{"transform":{"headers":{"A":"${e2b.secrets.openai}"}}}]}}}`); r.status != 400 {
		t.Fatalf("another team's secret: %d %s", r.status, r.body)
	}
}

// TestEgressLogRoute: the egress log is a team's own (another team's
// sandbox is a 404) and a 501 where the node keeps none (the fake node).
func TestEgressLogRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.create(e.key1, client.NewSandbox{})
	if r := e.do("GET", "/sandboxes/"+sb.SandboxID+"/egress", e.key2, ""); r.status != 404 {
		t.Fatalf("another team's: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/sandboxes/"+sb.SandboxID+"/egress", e.key1, ""); r.status != 501 || !strings.Contains(string(r.body), "egress log") {
		t.Fatalf("no log on the node: %d %s", r.status, r.body)
	}
}
