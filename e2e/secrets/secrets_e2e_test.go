//go:build e2e

// Package secretse2e runs E2B's Secret and network API through the real
// JS SDK against `warren serve` with runsc sandboxes, whose egress proxy
// reaches an internet the test makes (egressproxytest: HTTPS servers in a
// network namespace, a DNS server on loopback, a SOCKS5 server), with the
// test's addresses declared reachable (--egress-proxy-allow) and its CA
// trusted (--egress-proxy-ca-file).
package secretse2e

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/egressproxy/egressproxytest"
)

var iso = e2eserve.NewIsolation("secrets", "100.108.0.0/16", "wse")

func TestMain(m *testing.M) { e2eserve.Main(m, iso) }

const (
	apiKey     = "e2b_7365637265747365326500000000000000aa0001"
	adminToken = "secrets-e2e-admin-token-0123456789abcdef"
)

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestSecretsAndNetworkRules: the SDK's Secret API; a sandbox that may
// reach only its allowOut domains, with a header transform carrying a
// secret; every channel a sandbox has to read the secret (secrets.mjs);
// the upstream got it and nobody else did; no log line, metric or event
// holds it; a live update; the SOCKS5 egressProxy and its failing closed.
func TestSecretsAndNetworkRules(t *testing.T) {
	e2eserve.Prerequisites(t)
	world := egressproxytest.NewWorld(t)
	res := egressproxytest.NewResolver(map[string][]netip.Addr{})
	up := func(names ...string) *egressproxytest.Upstream {
		u := world.HTTPS(t, names...)
		for _, n := range names {
			res.Set(n, u.Addr)
		}
		return u
	}
	api := up("api.test.example")
	other := up("other.test.example")
	wild := up("a.wild.test.example")
	attacker := world.HTTPS(t, "api.test.example") // a valid certificate for the name, at another address
	downAddr := world.Addr()                       // nothing listens there
	res.Set("down.test.example", downAddr)
	// The SOCKS5 proxy resolves names itself (remote DNS).
	socks := world.SOCKS5(t, "proxy-user", "proxy-pass-"+random(4), map[string]netip.Addr{"other.test.example": other.Addr})
	dns := egressproxytest.DNSServer(t, res)

	dir := t.TempDir()
	caFile := filepath.Join(dir, "world-ca.pem")
	keyFile := filepath.Join(dir, "secrets.key")
	must(t, os.WriteFile(caFile, world.CA.PEM, 0o600))
	must(t, os.WriteFile(keyFile, []byte(random(32)+"\n"), 0o600))

	s := e2eserve.Start(t, e2eserve.Options{DataDir: filepath.Join(dir, "data"), APIKey: apiKey, AdminToken: adminToken, Isolation: iso,
		ExtraArgs: []string{"--secrets-key-file", keyFile, "--egress-proxy-allow", world.Prefix.String(),
			"--egress-dns", dns, "--egress-proxy-ca-file", caFile, "--log-level", "debug"}})

	secret := "sk-e2e-" + random(12)
	secret2 := "sk-e2e-two-" + random(12)
	env := []string{"E2E_SECRET=" + secret, "E2E_SECRET2=" + secret2, "E2E_RUN=" + random(3),
		"E2E_API_HOST=api.test.example", "E2E_API_IP=" + api.Addr.String(), "E2E_OTHER_HOST=other.test.example",
		"E2E_OTHER_IP=" + other.Addr.String(), "E2E_ATTACKER_IP=" + attacker.Addr.String(), "E2E_DOWN_HOST=down.test.example",
		"E2E_SOCKS=" + socks.Addr.String(), "E2E_SOCKS_USER=" + socks.User, "E2E_SOCKS_PASS=" + socks.Password}
	runStep := func(args ...string) string {
		t.Helper()
		out, code := s.Run(t, env, "node", append([]string{"secrets.mjs"}, args...)...)
		if code != 0 || !strings.Contains(out, "OK "+args[0]) {
			t.Fatalf("step %s (exit %d):\n%s", args[0], code, out)
		}
		t.Log(strings.TrimSpace(out))
		return out
	}
	runStep("secrets")
	runStep("rules")

	// The upstream got the secret (the first value, then the updated
	// one) in place of the sandbox's own header; the placeholder the
	// sandbox sent itself went as it was.
	var first, second, probe bool
	for _, r := range api.Requests() {
		auth := r.Header.Values("Authorization")
		switch {
		case r.Path == "/v1/models" && slices.Equal(auth, []string{"Bearer " + secret}):
			first = true
			probe = strings.HasPrefix(r.Header.Get("X-Probe"), "${e2b.secrets.")
		case r.Path == "/v2" && slices.Equal(auth, []string{"Bearer " + secret2}):
			second = true
		case r.Path == "/after-update":
			t.Errorf("a request after the update reached the old host: %+v", r)
		}
		if !r.TLS {
			t.Errorf("a request to the transform host went in the clear: %+v", r)
		}
	}
	if !first || !second || !probe {
		t.Errorf("upstream requests (secret %v, updated secret %v, placeholder kept %v): %+v", first, second, probe, api.Requests())
	}
	if n := len(attacker.Requests()); n != 0 {
		t.Errorf("the attacker's server got %d requests: %+v", n, attacker.Requests())
	}
	if len(wild.Requests()) != 1 {
		t.Errorf("wildcard host: %+v", wild.Requests())
	}

	out := runStep("proxy")
	id := regexp.MustCompile(`SANDBOX (\S+)`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no sandbox ID in %s", out)
	}
	if targets := socks.Targets(); !slices.Contains(targets, "other.test.example:443") {
		t.Fatalf("the SOCKS proxy was asked for %v", targets)
	}
	before := len(other.Requests())
	socks.Stop()
	runStep("proxydown", id[1])
	if n := len(other.Requests()); n != before {
		t.Errorf("with the SOCKS proxy down, %d requests went out directly", n-before)
	}

	// No log line, metric or event holds a value.
	m := string(e2eserve.Admin{URL: s.Env["E2B_API_URL"], Token: adminToken}.Call(t, "GET", "/metrics"))
	for _, series := range []string{`egress_connections_total{decision="allowed",reason="allowed_name"}`, `egress_connections_total{decision="denied"`, `egress_dns_queries_total{decision="denied"}`} {
		if !strings.Contains(m, series) {
			t.Errorf("metrics lack %s", series)
		}
	}
	logs := s.Logs()
	for _, v := range []string{secret, secret2, socks.Password} {
		if strings.Contains(logs, v) || strings.Contains(m, v) {
			t.Errorf("a value is in the server's log or metrics")
		}
	}
	if !strings.Contains(logs, "egress refused") {
		t.Errorf("the debug log has no egress decision")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
