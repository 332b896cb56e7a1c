package netslot

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/warren-sandbox/warren/internal/mountinfo"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/testenv"
)

func requireRoot(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "network slot tests")
}

func testLog(t testing.TB) *slog.Logger { return testenv.Logger(t) }

// testPoolConfig is a pool of its own: a random /24 inside 100.80.0.0/12,
// its own table and interface prefix, so that tests never touch another
// pool (a running node agent's or another test's). It matches
// netslottest.Config, which cannot be imported here (cycle).
func testPoolConfig() Config {
	letters := "abcdefghijklmnopqrstuvwxyz"
	return Config{
		CIDR:     netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(80 + rand.IntN(16)), byte(rand.IntN(256)), 0}), 24),
		Table:    testenv.Name("warren-test-"),
		IfPrefix: "t" + string(letters[rand.IntN(26)]) + string(letters[rand.IntN(26)]),
	}
}

// newTestPool makes a pool and, at the end, reclaims everything it made,
// drops its table, and fails if anything of it is left.
func newTestPool(t testing.TB) (*pool, Config) {
	t.Helper()
	requireRoot(t)
	cfg := testPoolConfig()
	pl, err := NewPool(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*pool)
	t.Cleanup(func() { cleanupPool(t, p.cfg) })
	return p, p.cfg
}

func cleanupPool(t testing.TB, cfg Config) {
	t.Helper()
	p, err := NewPool(cfg, testLog(t))
	if err != nil {
		t.Errorf("cleanup pool: %v", err)
		return
	}
	if _, err := p.ReclaimLeaked(context.Background(), nil); err != nil {
		t.Errorf("cleanup reclaim: %v", err)
	}
	if err := DeleteTable(cfg); err != nil {
		t.Errorf("cleanup table: %v", err)
	}
	assertNothingLeft(t, cfg, nil)
}

// assertNothingLeft fails if a veth, namespace or slot chain of the pool
// remains for a sandbox not in keep.
func assertNothingLeft(t testing.TB, cfg Config, keep map[string]bool) {
	t.Helper()
	links, err := listLinks(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, cfg.IfPrefix) {
			if _, id, _, _ := parseAlias(l.Attrs().Alias); !keep[id] {
				t.Errorf("veth %s (%s) left", l.Attrs().Name, l.Attrs().Alias)
			}
		}
	}
	ents, _ := os.ReadDir(cfg.NetNSDir)
	for _, e := range ents {
		if id, ok := sandboxOfNetNS(e.Name()); ok && strings.HasPrefix(id, testIDPrefix(cfg)) && !keep[id] {
			t.Errorf("netns %s left", e.Name())
		}
	}
	// Nor a namespace mount that no path reaches any more.
	mounts, err := mountinfo.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if id, ok := sandboxOfNetNS(filepath.Base(m.Point)); ok && m.FSType == "nsfs" && strings.HasPrefix(id, testIDPrefix(cfg)) && !keep[id] {
			t.Errorf("netns mount %s (%s) left", m.Point, m.Root)
		}
	}
	conn, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	chains, _ := conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	for _, ch := range chains {
		if ch.Table.Name == cfg.Table {
			if id, _, ok := parseSlotChain(ch.Name); ok && !keep[id] {
				t.Errorf("chain %s left", ch.Name)
			}
		}
	}
}

// testIDPrefix starts the sandbox IDs of a test pool.
func testIDPrefix(cfg Config) string { return "t" + cfg.IfPrefix }

func testID(cfg Config) string { return testIDPrefix(cfg) + sandbox.NewExecutionID()[:10] }

// inNS runs fn on an OS thread inside the namespace at path; the thread is
// discarded afterwards.
func inNS(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		h, err := netns.GetFromPath(path)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// serve listens on addr (inside namespace ns when ns != "") and answers
// every connection with the peer's address.
func serve(t testing.TB, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	listen := func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	}
	var err error
	if ns == "" {
		err = listen()
	} else {
		err = inNS(ns, listen)
	}
	if err != nil {
		t.Fatalf("listen %s in %q: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, c.RemoteAddr().(*net.TCPAddr).IP)
			c.Close()
		}
	}()
	return ln
}

// dial connects from namespace ns ("" = the host) and returns what the
// server says: the address it saw us as.
func dial(ns, addr string) (string, error) {
	var out string
	do := func() error {
		c, err := net.DialTimeout("tcp4", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		out = strings.TrimSpace(line)
		return err
	}
	if ns == "" {
		return out, do()
	}
	return out, inNS(ns, do)
}

func port(ln net.Listener) string { return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port) }

func acquire(t testing.TB, p Pool, cfg Config, pol Policy) *Slot {
	t.Helper()
	s, err := p.Acquire(context.Background(), testID(cfg), pol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Release(context.Background(), s); err != nil {
			t.Errorf("release: %v", err)
		}
	})
	return s
}

func hostAddr(t testing.TB, exclude netip.Prefix) (netip.Addr, bool) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP.To4())
		if ok && ip.IsGlobalUnicast() && !exclude.Contains(ip) && !netip.MustParsePrefix("100.64.0.0/10").Contains(ip) &&
			!netip.MustParsePrefix("198.18.0.0/15").Contains(ip) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func TestIsolation(t *testing.T) {
	t.Parallel()
	p, cfg := newTestPool(t)
	a := acquire(t, p, cfg, Policy{Internet: true})
	b := acquire(t, p, cfg, Policy{Internet: true})
	if a.GuestIP == b.GuestIP || a.HostVeth == b.HostVeth || a.NetNS == b.NetNS {
		t.Fatalf("slots share objects: %+v %+v", a, b)
	}
	for _, s := range []*Slot{a, b} {
		if !strings.HasPrefix(s.NetNS, sandbox.HostName(s.SandboxID)) || len(s.HostVeth) > 15 {
			t.Errorf("names: %+v", s)
		}
		if l, err := netlink.LinkByName(s.HostVeth); err != nil || l.Attrs().MTU != defaultRouteMTU() {
			t.Errorf("veth MTU: %v (host default route MTU %d)", err, defaultRouteMTU())
		}
	}
	srvA := serve(t, a.NetNSPath, "0.0.0.0:0")
	srvB := serve(t, b.NetNSPath, "0.0.0.0:0")
	hostLo := serve(t, "", "127.0.0.1:0")
	hostAny := serve(t, "", "0.0.0.0:0")

	type check struct {
		name string
		from string
		to   string
		want bool
	}
	checks := []check{
		{"host_to_sandbox_a", "", net.JoinHostPort(a.GuestIP.String(), port(srvA)), true},
		{"host_to_sandbox_b", "", net.JoinHostPort(b.GuestIP.String(), port(srvB)), true},
		{"sandbox_own_loopback", a.NetNSPath, "127.0.0.1:" + port(srvA), true},
		{"a_to_b", a.NetNSPath, net.JoinHostPort(b.GuestIP.String(), port(srvB)), false},
		{"b_to_a", b.NetNSPath, net.JoinHostPort(a.GuestIP.String(), port(srvA)), false},
		{"host_loopback_service_from_host", "", hostLo.Addr().String(), true},
		{"host_loopback_service_from_a", a.NetNSPath, hostLo.Addr().String(), false},
		{"host_veth_address_from_host", "", net.JoinHostPort(a.HostIP.String(), port(hostAny)), true},
		{"host_veth_address_from_a", a.NetNSPath, net.JoinHostPort(a.HostIP.String(), port(hostAny)), false},
		{"other_slot_gateway_from_a", a.NetNSPath, net.JoinHostPort(b.HostIP.String(), port(hostAny)), false},
	}
	if ip, ok := hostAddr(t, cfg.CIDR); ok {
		checks = append(checks,
			check{"host_lan_address_from_host", "", net.JoinHostPort(ip.String(), port(hostAny)), true},
			check{"host_lan_address_from_a", a.NetNSPath, net.JoinHostPort(ip.String(), port(hostAny)), false})
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			_, err := dial(c.from, c.to)
			if (err == nil) != c.want {
				t.Errorf("dial %s from %q: err=%v, want reachable=%v", c.to, c.from, err, c.want)
			}
		})
	}
}

// outside is a network namespace made by the test that stands in for the
// internet (198.18.x.2) and for a private network (192.168.x.2), routed
// from the host through a veth.
type outside struct {
	ns        string
	public    netip.Addr
	private   netip.Addr
	hostSide  netip.Addr
	publicLn  net.Listener
	privateLn net.Listener
}

func newOutside(t testing.TB, cfg Config) *outside {
	t.Helper()
	x := byte(rand.IntN(250) + 1)
	o := &outside{
		ns:       testenv.Name("wtest-ext-"),
		public:   netip.AddrFrom4([4]byte{198, 18, x, 2}),
		hostSide: netip.AddrFrom4([4]byte{198, 18, x, 1}),
		private:  netip.AddrFrom4([4]byte{192, 168, x, 2}),
	}
	hostVeth, peer := cfg.IfPrefix+"x"+fmt.Sprint(x), cfg.IfPrefix+"y"+fmt.Sprint(x)
	ns, err := newNamedNetNS(cfg.NetNSDir, o.ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = deleteLink(hostVeth)
		if err := deleteNetNS(cfg.NetNSDir, o.ns); err != nil {
			t.Error(err)
		}
	})
	defer ns.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostVeth}, PeerName: peer}))
	hl, err := netlink.LinkByName(hostVeth)
	must(err)
	pl, err := netlink.LinkByName(peer)
	must(err)
	must(netlink.LinkSetNsFd(pl, int(ns)))
	must(netlink.AddrAdd(hl, &netlink.Addr{IPNet: ipNet(o.hostSide, 30)}))
	must(netlink.AddrAdd(hl, &netlink.Addr{IPNet: ipNet(netip.AddrFrom4([4]byte{192, 168, x, 1}), 30)}))
	must(netlink.LinkSetUp(hl))
	h, err := netlink.NewHandleAt(ns)
	must(err)
	defer h.Close()
	pl, err = h.LinkByName(peer)
	must(err)
	must(h.AddrAdd(pl, &netlink.Addr{IPNet: ipNet(o.public, 30)}))
	must(h.AddrAdd(pl, &netlink.Addr{IPNet: ipNet(o.private, 30)}))
	must(h.LinkSetUp(pl))
	lo, err := h.LinkByName("lo")
	must(err)
	must(h.LinkSetUp(lo))
	path := filepath.Join(cfg.NetNSDir, o.ns)
	o.publicLn = serve(t, path, net.JoinHostPort(o.public.String(), "0"))
	o.privateLn = serve(t, path, net.JoinHostPort(o.private.String(), "0"))
	return o
}

func TestEgressPolicy(t *testing.T) {
	t.Parallel()
	p, cfg := newTestPool(t)
	o := newOutside(t, cfg)
	pub := net.JoinHostPort(o.public.String(), port(o.publicLn))
	priv := net.JoinHostPort(o.private.String(), port(o.privateLn))
	if _, err := dial("", pub); err != nil {
		t.Fatalf("host cannot reach the test's outside server: %v", err)
	}
	s := acquire(t, p, cfg, Policy{})
	pfx := func(a netip.Addr, bits int) []netip.Prefix { return []netip.Prefix{netip.PrefixFrom(a, bits).Masked()} }
	steps := []struct {
		name   string
		policy Policy
		target string
		want   bool
	}{
		{"internet_off_blocks", Policy{}, pub, false},
		{"allow_out_opens", Policy{AllowOut: pfx(o.public, 32)}, pub, true},
		{"allow_out_other_stays_closed", Policy{AllowOut: pfx(o.public, 32)}, priv, false},
		{"internet_on", Policy{Internet: true}, pub, true},
		{"deny_out_wins_over_internet", Policy{Internet: true, DenyOut: pfx(o.public, 24)}, pub, false},
		{"deny_out_wins_over_allow_out", Policy{AllowOut: pfx(o.public, 32), DenyOut: pfx(o.public, 32)}, pub, false},
		{"rfc1918_blocked_with_internet", Policy{Internet: true}, priv, false},
		{"rfc1918_not_opened_by_allow_out", Policy{Internet: true, AllowOut: pfx(o.private, 16)}, priv, false},
		{"internet_off_again", Policy{}, pub, false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := p.Update(context.Background(), s, st.policy); err != nil {
				t.Fatal(err)
			}
			seen, err := dial(s.NetNSPath, st.target)
			if (err == nil) != st.want {
				t.Fatalf("dial %s: err=%v, want reachable=%v", st.target, err, st.want)
			}
			if err == nil && seen != o.hostSide.String() {
				t.Errorf("server saw %s, want the masqueraded %s", seen, o.hostSide)
			}
		})
	}
	if s.Policy.Internet || len(s.Policy.AllowOut) != 0 {
		t.Errorf("slot policy not updated: %+v", s.Policy)
	}
}

func TestAdoptAndReclaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, cfg := newTestPool(t)
	kept := acquire(t, p, cfg, Policy{Internet: true})
	lost1, err := p.Acquire(ctx, testID(cfg), Policy{})
	if err != nil {
		t.Fatal(err)
	}
	lost2, err := p.Acquire(ctx, testID(cfg), Policy{})
	if err != nil {
		t.Fatal(err)
	}
	released := acquire(t, p, cfg, Policy{})
	if err := p.Release(ctx, released); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx, released); err != nil {
		t.Errorf("second Release: %v", err)
	}
	// A half-made slot: the host veth gone, the namespace still there.
	if err := deleteLink(lost2.HostVeth); err != nil {
		t.Fatal(err)
	}
	// A pair the agent made but did not label before dying.
	bare := cfg.hostVethName(cfg.slots()-1, 7)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: bare}, PeerName: cfg.guestTempName(cfg.slots()-1, 7)}); err != nil {
		t.Fatal(err)
	}
	// The agent restarts: a new pool on the same table knows nothing.
	p2i, err := NewPool(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	p2 := p2i.(*pool)
	srv := serve(t, kept.NetNSPath, "0.0.0.0:0")
	if err := p2.Adopt(ctx, kept); err != nil {
		t.Fatal(err)
	}
	if err := p2.Adopt(ctx, &Slot{SandboxID: kept.SandboxID, Index: kept.Index + 1, NetNS: kept.NetNS}); err == nil {
		t.Error("Adopt of a slot that does not fit succeeded")
	}
	n, err := p2.ReclaimLeaked(ctx, map[string]bool{kept.SandboxID: true})
	if err != nil {
		t.Fatal(err)
	}
	// lost1: veth, netns, chain; lost2: netns, chain; the unlabelled pair.
	if n != 6 {
		t.Errorf("reclaimed %d objects, want 6", n)
	}
	assertNothingLeft(t, cfg, map[string]bool{kept.SandboxID: true})
	if _, err := dial("", net.JoinHostPort(kept.GuestIP.String(), port(srv))); err != nil {
		t.Errorf("adopted slot unreachable: %v", err)
	}
	// The adopted slot keeps its policy and can be updated by the new pool.
	if err := p2.Update(ctx, kept, Policy{}); err != nil {
		t.Error(err)
	}
	// Its index is taken in the new pool.
	s, err := p2.Acquire(ctx, testID(cfg), Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Index == kept.Index {
		t.Error("new slot got the adopted slot's index")
	}
	for _, x := range []*Slot{s, kept} {
		if err := p2.Release(ctx, x); err != nil {
			t.Error(err)
		}
	}
	_ = lost1
}

func TestAcquireReleaseCyclesLeakNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, cfg := newTestPool(t)
	var mu sync.Mutex
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		s, err := p.Acquire(ctx, testID(cfg), Policy{Internet: i%2 == 0})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		mu.Lock()
		if seen[s.HostVeth] || seen[s.NetNS] {
			t.Errorf("name reused: %s %s", s.HostVeth, s.NetNS)
		}
		seen[s.HostVeth], seen[s.NetNS] = true, true
		mu.Unlock()
		if err := p.Release(ctx, s); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	assertNothingLeft(t, cfg, nil)
	p.mu.Lock()
	for i, u := range p.used {
		if u {
			t.Errorf("index %d still marked used", i)
		}
	}
	p.mu.Unlock()
}

func TestAcquireInvalid(t *testing.T) {
	t.Parallel()
	p, _ := newTestPool(t)
	if _, err := p.Acquire(context.Background(), "Bad/ID", Policy{}); err == nil {
		t.Error("bad sandbox ID accepted")
	}
	if _, err := p.Acquire(context.Background(), "ok", Policy{AllowOut: []netip.Prefix{netip.MustParsePrefix("::/0")}}); err == nil {
		t.Error("IPv6 prefix accepted")
	}
	if err := p.Update(context.Background(), &Slot{SandboxID: "x", NetNS: "sbx-x-1"}, Policy{}); err == nil {
		t.Error("Update of an unknown slot succeeded")
	}
}

// BenchmarkAcquireRelease reports the time to set up and tear down one slot.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	p, cfg := newTestPool(b)
	var acq, rel time.Duration
	for b.Loop() {
		t0 := time.Now()
		s, err := p.Acquire(ctx, testID(cfg), Policy{Internet: true})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := p.Release(ctx, s); err != nil {
			b.Fatal(err)
		}
		acq += t1.Sub(t0)
		rel += time.Since(t1)
	}
	b.ReportMetric(float64(acq.Microseconds())/float64(b.N)/1000, "ms-acquire/op")
	b.ReportMetric(float64(rel.Microseconds())/float64(b.N)/1000, "ms-release/op")
}

func TestConcurrentAcquireRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, cfg := newTestPool(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 8; i++ {
				s, err := p.Acquire(ctx, testID(cfg), Policy{Internet: true})
				if err != nil {
					errs <- err
					return
				}
				if err := p.Update(ctx, s, Policy{}); err != nil {
					errs <- err
				}
				if err := p.Release(ctx, s); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assertNothingLeft(t, cfg, nil)
}

// TestHostAllowed: the operator's exceptions open an always-blocked
// destination and a host address, and nothing else.
func TestHostAllowed(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	cfg := testPoolConfig()
	t.Cleanup(func() { cleanupPool(t, cfg) }) // after the outside's cleanup
	o := newOutside(t, cfg)
	hostSrv := serve(t, "", "0.0.0.0:0")
	cfg.HostAllowed = []netip.Prefix{netip.PrefixFrom(o.private, 32)}
	lan, haveLAN := hostAddr(t, cfg.CIDR)
	if haveLAN {
		cfg.HostAllowed = append(cfg.HostAllowed, netip.PrefixFrom(lan, 32))
	}
	pl, err := NewPool(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	s := acquire(t, pl, cfg, Policy{DenyOut: []netip.Prefix{netip.PrefixFrom(o.public, 32)}})
	checks := []struct {
		name, to string
		want     bool
	}{
		{"allowed_private_address", net.JoinHostPort(o.private.String(), port(o.privateLn)), true},
		{"gateway_still_blocked", net.JoinHostPort(s.HostIP.String(), port(hostSrv)), false},
		{"deny_out_still_applies", net.JoinHostPort(o.public.String(), port(o.publicLn)), false},
	}
	if haveLAN {
		checks = append(checks, struct {
			name, to string
			want     bool
		}{"allowed_host_address", net.JoinHostPort(lan.String(), port(hostSrv)), true})
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if _, err := dial(s.NetNSPath, c.to); (err == nil) != c.want {
				t.Errorf("dial %s: %v, want reachable=%v", c.to, err, c.want)
			}
		})
	}
}
