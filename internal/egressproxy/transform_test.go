package egressproxy_test

import (
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/egressproxy"
	"github.com/warren-sandbox/warren/internal/egressproxy/egressproxytest"
	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/netslot"
)

// theSecret is a filled-in secret: it must reach the upstream and
// nothing the sandbox can see.
const theSecret = "sk-live-TOPSECRET-4242"

func transformPolicy(hosts ...string) netslot.Policy {
	return netslot.Policy{Egress: &egressrules.Rules{
		Hosts:      hosts,
		Transforms: []egressrules.Transform{{Host: "api.test.example", Headers: map[string]string{"Authorization": "Bearer " + theSecret}}},
	}}
}

// TestTransformInjectsSecret: an HTTPS request to a host with a transform
// reaches it, verified, with the header set (the sandbox's own value of
// it replaced); a placeholder the sandbox sends itself is not filled in;
// the sandbox's own view of the exchange shows no secret.
func TestTransformInjectsSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := e.upstream("api.test.example")
	s := e.slot(transformPolicy("api.test.example"))
	r := e.get(s, "https://api.test.example/v1/models", func(op *egressproxytest.GuestOp) {
		op.Header = map[string]string{"Authorization": "Bearer sandbox-own", "X-Probe": "${e2b.secrets.openai}"}
	})
	if !ok(r, "hello from api.test.example") {
		t.Fatalf("request: %s", r)
	}
	reqs := api.Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream got %d requests", len(reqs))
	}
	got := reqs[0]
	if got.Header.Get("Authorization") != "Bearer "+theSecret || len(got.Header.Values("Authorization")) != 1 {
		t.Errorf("upstream's Authorization: %q", got.Header.Values("Authorization"))
	}
	if got.Header.Get("X-Probe") != "${e2b.secrets.openai}" {
		t.Errorf("a placeholder the sandbox sent was changed: %q", got.Header.Get("X-Probe"))
	}
	if !got.TLS || got.SNI != "api.test.example" || got.Path != "/v1/models" || got.Host != "api.test.example" {
		t.Errorf("upstream request: %+v", got)
	}
	if strings.Contains(r.String(), theSecret) {
		t.Fatalf("the sandbox saw the secret: %s", r)
	}
}

// TestTransformAttacks: every way a sandbox has to make the proxy send
// the secret somewhere else, or show it, fails.
func TestTransformAttacks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := e.upstream("api.test.example")
	attacker := e.world.HTTPS(t, "api.test.example", "attacker.test.example")
	e.res.Set("attacker.test.example", attacker.Addr)
	s := e.slot(transformPolicy("api.test.example", "attacker.test.example"))
	otherSandbox := e.slot(transformPolicy("api.test.example"))

	cases := []struct {
		name string
		op   func(*egressproxytest.GuestOp)
	}{
		{"the name to another address", func(op *egressproxytest.GuestOp) { op.Dial = attacker.Addr.String() + ":443" }},
		{"plain HTTP to the host (no secret in the clear)", func(op *egressproxytest.GuestOp) { op.URL = "http://api.test.example/" }},
		{"another Host than the TLS name", func(op *egressproxytest.GuestOp) { op.Host = "attacker.test.example" }},
	}
	for _, c := range cases {
		op := egressproxytest.GuestOp{Op: "http", URL: "https://api.test.example/", RootsPEM: [][]byte{e.world.CA.PEM, mustCA(t, e, s.SandboxID)}}
		c.op(&op)
		r := e.guest(s, op)
		if strings.Contains(r.String(), theSecret) {
			t.Errorf("%s: the sandbox saw the secret: %s", c.name, r)
		}
	}
	// Another sandbox's CA does not open this one's TLS: a sandbox cannot
	// use its own CA's key (it has none) nor another's certificate.
	if r := e.guest(s, egressproxytest.GuestOp{Op: "http", URL: "https://api.test.example/", RootsPEM: [][]byte{e.world.CA.PEM, mustCA(t, e, otherSandbox.SandboxID)}}); r.Err == "" {
		t.Errorf("a sandbox trusting another sandbox's CA got through: %s", r)
	}
	for _, rq := range attacker.Requests() {
		if strings.Contains(rq.Header.Get("Authorization"), theSecret) {
			t.Fatalf("the attacker's server got the secret: %+v", rq)
		}
	}
	for _, rq := range api.Requests() {
		if !rq.TLS && rq.Header.Get("Authorization") != "" {
			t.Fatalf("the secret went in the clear: %+v", rq)
		}
		if rq.Host != "api.test.example" {
			t.Fatalf("a request for another Host reached the host: %+v", rq)
		}
	}
	// A 421 for the wrong Host, and nothing else of the proxy's, carries
	// the secret; the log and the metrics do not either.
	if strings.Contains(e.logs.String(), theSecret) {
		t.Fatal("the proxy's log carries the secret")
	}
	if entries, err := e.px.Log(s.SandboxID); err != nil || strings.Contains(strings.Join(entryStrings(entries), "\n"), theSecret) {
		t.Fatalf("egress log: %v %v", entries, err)
	}
	mfs, err := e.reg.Gather()
	if err != nil || len(mfs) == 0 {
		t.Fatalf("metrics: %d, %v", len(mfs), err)
	}
	for _, mf := range mfs {
		if strings.Contains(mf.String(), theSecret) {
			t.Fatalf("a metric carries the secret: %s", mf)
		}
	}
}

func mustCA(t *testing.T, e *env, id string) []byte {
	t.Helper()
	ca, err := e.pool.CACert(id)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func entryStrings(es []egressproxy.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Host+" "+e.Addr+" "+e.Reason)
	}
	return out
}

// TestTransformUntrustedUpstream: when the destination's certificate
// does not verify, the sandbox gets the proxy's 502, which names the
// failure and carries nothing of the secret; no request is sent.
func TestTransformUntrustedUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// api.test.example answered by a server with a certificate of a CA
	// the host does not trust.
	other := egressproxytest.NewCA(t)
	a := e.world.Addr()
	l, err := e.world.Listen("tcp4", net.JoinHostPort(a.String(), "443"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan http.Header, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header })}
	go srv.Serve(tls.NewListener(l.(net.Listener), &tls.Config{Certificates: []tls.Certificate{other.Leaf(t, "api.test.example")}}))
	t.Cleanup(func() { srv.Close() })
	e.res.Set("api.test.example", a)
	s := e.slot(transformPolicy("api.test.example"))
	r := e.get(s, "https://api.test.example/")
	if r.Status != http.StatusBadGateway || !strings.Contains(r.Body, "certificate did not verify") || strings.Contains(r.Body, theSecret) {
		t.Fatalf("untrusted upstream: %s", r)
	}
	select {
	case h := <-got:
		t.Fatalf("a request went to the untrusted upstream: %v", h)
	default:
	}
}

// TestTransformNeedsTheSandboxCA: without its CA in its trust store the
// sandbox's TLS handshake fails (it does not silently go unverified), and
// no request is sent.
func TestTransformNeedsTheSandboxCA(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := e.upstream("api.test.example")
	s := e.slot(transformPolicy("api.test.example"))
	r := e.guest(s, egressproxytest.GuestOp{Op: "http", URL: "https://api.test.example/", RootsPEM: [][]byte{e.world.CA.PEM}})
	if r.Err == "" || !strings.Contains(r.Err, "certificate") {
		t.Fatalf("without the sandbox CA: %s", r)
	}
	if n := len(api.Requests()); n != 0 {
		t.Fatalf("upstream got %d requests", n)
	}
}
