package netslot

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// proxyStandIn listens on a slot's host address as the egress proxy does:
// TCP connections are answered with their original destination, UDP
// datagrams with "dns <from>".
type proxyStandIn struct {
	tcp, dnsTCP net.Listener
	udp         *net.UDPConn
}

func newProxyStandIn(t *testing.T, host netip.Addr) *proxyStandIn {
	t.Helper()
	x := &proxyStandIn{}
	var err error
	for _, ln := range []*net.Listener{&x.tcp, &x.dnsTCP} {
		if *ln, err = net.Listen("tcp4", net.JoinHostPort(host.String(), "0")); err != nil {
			t.Fatal(err)
		}
		l := *ln
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				dst, err := OriginalDst(c.(*net.TCPConn))
				if err != nil {
					fmt.Fprintf(c, "error %v\n", err)
				} else {
					fmt.Fprintf(c, "%s\n", dst)
				}
				c.Close()
			}
		}()
	}
	if x.udp, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(host, 0))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.udp.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := x.udp.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			x.udp.WriteToUDPAddrPort([]byte("dns "+from.String()), from)
		}
	}()
	return x
}

func (x *proxyStandIn) redirect() *Redirect {
	p := func(l net.Listener) uint16 { return uint16(l.Addr().(*net.TCPAddr).Port) }
	return &Redirect{TCP: p(x.tcp), DNSTCP: p(x.dnsTCP), DNSUDP: uint16(x.udp.LocalAddr().(*net.UDPAddr).Port)}
}

// udpAsk sends a datagram from namespace ns to addr and returns the
// answer, or an error when none comes within a second.
func udpAsk(ns, addr string) (string, error) {
	var out string
	err := inNS(ns, func() error {
		c, err := net.Dial("udp4", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("q")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		out = string(buf[:n])
		return err
	})
	return out, err
}

// TestRedirect: a slot behind the egress proxy forwards no new connection
// until it is redirected, then sends all its TCP and its DNS to the
// proxy's listeners with the original destination readable; other UDP is
// refused; back off the proxy it is forwarded as before.
func TestRedirect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, cfg := newTestPool(t)
	o := newOutside(t, cfg)
	pub := net.JoinHostPort(o.public.String(), port(o.publicLn))
	egress := &egressrules.Rules{Hosts: []string{"example.com"}}
	s := acquire(t, p, cfg, Policy{Internet: true, Egress: egress})

	if _, err := dial(s.NetNSPath, pub); err == nil {
		t.Fatal("behind the proxy but not yet redirected, a connection is forwarded")
	}
	if _, err := udpAsk(s.NetNSPath, "8.8.8.8:53"); err == nil {
		t.Fatal("DNS answered before the redirect")
	}
	px := newProxyStandIn(t, s.HostIP)
	if err := p.Update(ctx, s, Policy{Internet: true, Egress: egress, Redirect: &Redirect{TCP: 1}}); err == nil {
		t.Fatal("a redirect without every port is accepted")
	}
	if err := p.Update(ctx, s, Policy{Internet: true, Redirect: px.redirect()}); err == nil {
		t.Fatal("a redirect without egress rules is accepted")
	}
	if err := p.Update(ctx, s, Policy{Internet: true, Egress: egress, Redirect: px.redirect()}); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{pub, "203.0.113.9:443", net.JoinHostPort(s.HostIP.String(), "22"), "10.1.2.3:22"} {
		got, err := dial(s.NetNSPath, target)
		if err != nil || got != target {
			t.Errorf("TCP to %s reached the proxy as %q, %v; want its original destination", target, got, err)
		}
	}
	// The listener itself is not reachable as it is: a connection to it
	// is not one the slot's nat chain changed, so the input chain refuses
	// it.
	if got, err := dial(s.NetNSPath, net.JoinHostPort(s.HostIP.String(), port(px.tcp))); err == nil {
		t.Errorf("the guest reached the proxy listener directly: %q", got)
	}
	if got, err := dial(s.NetNSPath, "8.8.8.8:53"); err != nil || got != "8.8.8.8:53" {
		t.Errorf("DNS over TCP reached %q, %v", got, err)
	}
	want := "dns " + s.GuestIP.String()
	if got, err := udpAsk(s.NetNSPath, "8.8.8.8:53"); err != nil || len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("DNS over UDP: %q, %v; want an answer from the proxy to %s", got, err, s.GuestIP)
	}
	if got, err := udpAsk(s.NetNSPath, net.JoinHostPort(o.public.String(), "443")); err == nil {
		t.Errorf("UDP other than DNS (QUIC) answered: %q", got)
	}

	// Off the proxy, the slot forwards as before.
	if err := p.Update(ctx, s, Policy{Internet: true}); err != nil {
		t.Fatal(err)
	}
	if seen, err := dial(s.NetNSPath, pub); err != nil || seen != o.hostSide.String() {
		t.Fatalf("off the proxy: %q, %v", seen, err)
	}
}

// TestRedirectAdopt: a restarted pool puts a redirected slot's redirects
// back when it adopts it.
func TestRedirectAdopt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, cfg := newTestPool(t)
	s, err := p.Acquire(ctx, testID(cfg), Policy{Egress: &egressrules.Rules{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Release(ctx, s) })
	px := newProxyStandIn(t, s.HostIP)
	if err := p.Update(ctx, s, Policy{Egress: &egressrules.Rules{}, Redirect: px.redirect()}); err != nil {
		t.Fatal(err)
	}
	p2, err := NewPool(cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(s.NetNSPath, "203.0.113.9:443"); err == nil {
		t.Fatal("a slot not adopted yet is redirected")
	}
	if err := p2.Adopt(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, err := dial(s.NetNSPath, "203.0.113.9:443"); err != nil || got != "203.0.113.9:443" {
		t.Fatalf("adopted slot: %q, %v", got, err)
	}
	if err := p2.Release(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// TestForeignDNATNotAccepted: the input chain lets in a guest's
// connection that a nat rule redirected, for the slots' own redirects to
// the egress proxy's listeners. A DNAT of another table on the host (a
// port forward, a transparent proxy) that sends a guest's connection to
// one of the host's own addresses outside the pool must not open the
// host to the guest by that: the guest is refused as without the rule.
func TestForeignDNATNotAccepted(t *testing.T) {
	t.Parallel()
	p, cfg := newTestPool(t)
	o := newOutside(t, cfg)
	s := acquire(t, p, cfg, Policy{Internet: true})
	hostLn := serve(t, "", net.JoinHostPort(o.hostSide.String(), "0"))
	hostPort, _ := strconv.Atoi(port(hostLn))

	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tbl := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: testenv.Name("wtest-foreign-")})
	pre := c.AddChain(&nftables.Chain{Name: "pre", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	c.AddRule(&nftables.Rule{Table: tbl, Chain: pre, Exprs: cat(ifname(expr.MetaKeyIIFNAME, s.HostVeth, false, expr.CmpOpEq),
		l4(unix.IPPROTO_TCP, 9), dnatTo(o.hostSide, uint16(hostPort)))})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.DelTable(tbl)
		if err := c.Flush(); err != nil {
			t.Error(err)
		}
	})
	if got, err := dial(s.NetNSPath, "203.0.113.9:9"); err == nil {
		t.Fatalf("a foreign DNAT opened the host's %s to the guest: it saw %q", hostLn.Addr(), got)
	}
}
