package egressproxy_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/netslot"
)

// TestEgressProxySOCKS: with an egressProxy, every allowed connection
// leaves through it (with its credentials; a name-allowed one by name,
// for the proxy's DNS), filtering first; when the proxy is down the
// connections fail and none goes out directly.
func TestEgressProxySOCKS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := e.upstream("api.test.example")
	plain := e.upstream("plain.test.example")
	other := e.upstream("other.test.example")
	sx := e.world.SOCKS5(t, "proxy-user", "proxy-pass", map[string]netip.Addr{"api.test.example": api.Addr})
	pol := netslot.Policy{AllowOut: []netip.Prefix{netip.PrefixFrom(plain.Addr, 32)}, Egress: &egressrules.Rules{
		Hosts: []string{"api.test.example"},
		Proxy: &egressrules.Proxy{Address: sx.Addr.String(), Username: "proxy-user", Password: "proxy-pass"},
	}}
	s := e.slot(pol)
	if r := e.get(s, "https://api.test.example/"); !ok(r, "hello from api.test.example") {
		t.Fatalf("through the proxy by name: %s", r)
	}
	if r := e.get(s, "https://plain.test.example/", dialTo(plain.Addr, "443")); !ok(r, "hello from plain.test.example") {
		t.Fatalf("through the proxy by address: %s", r)
	}
	if r := e.get(s, "https://other.test.example/", dialTo(other.Addr, "443")); r.Err == "" {
		t.Fatalf("filtering comes first: %s", r)
	}
	targets := sx.Targets()
	if !slices.Contains(targets, "api.test.example:443") || !slices.Contains(targets, plain.Addr.String()+":443") || len(targets) != 2 {
		t.Fatalf("proxy targets: %v", targets)
	}

	// Wrong credentials: refused, and nothing goes out directly.
	bad := pol.Clone()
	bad.Egress.Proxy.Password = "wrong"
	if err := e.pool.Update(context.Background(), s, bad); err != nil {
		t.Fatal(err)
	}
	before := len(api.Requests())
	if r := e.get(s, "https://api.test.example/"); r.Err == "" {
		t.Fatalf("wrong proxy credentials: %s", r)
	}
	// The proxy down: the same.
	if err := e.pool.Update(context.Background(), s, pol); err != nil {
		t.Fatal(err)
	}
	sx.Stop()
	if r := e.get(s, "https://api.test.example/"); r.Err == "" {
		t.Fatalf("proxy down: %s", r)
	}
	if len(api.Requests()) != before {
		t.Fatal("a connection went out directly while the proxy could not be used")
	}
	if !hasReason(e, s.SandboxID, "failed_proxy") {
		t.Error("the log does not say the proxy failed")
	}
}

// TestEgressProxyRefusedAddresses: a proxy the host may not connect to
// (private, loopback, not host:port, not resolving) is refused when the
// slot is made, with a message naming the field.
func TestEgressProxyRefusedAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, addr := range []string{"127.0.0.1:1080", "10.0.0.5:1080", "169.254.169.254:80", "no-port", "does-not-resolve.invalid:1080"} {
		_, err := e.pool.Acquire(context.Background(), "tsocks-bad", netslot.Policy{Egress: &egressrules.Rules{Proxy: &egressrules.Proxy{Address: addr}}})
		if !errdefs.IsInvalid(err) || !strings.Contains(errhttp.Message(err), "egressProxy") {
			t.Errorf("proxy %s: %v", addr, err)
		}
	}
}
