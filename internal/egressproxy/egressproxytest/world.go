// Package egressproxytest gives egress proxy tests an internet of their
// own, with no internet: a network namespace routed from the host with
// addresses in a random 198.19.x.0/24 (which the tests declare public to
// the proxy, egress.Policy), HTTPS servers there with certificates of a
// test CA, a SOCKS5 server, a DNS server on loopback answering the
// tests' names, and a guest runner that runs an HTTP or DNS request from
// inside a sandbox's network namespace (the test binary re-executed
// under nsenter).
package egressproxytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/warren-sandbox/warren/internal/testenv"
)

// World is the tests' internet: a namespace with a veth to the host.
type World struct {
	t      testing.TB
	Path   string       // the namespace's path
	Prefix netip.Prefix // its /24, to declare public
	host   netip.Addr   // the host's end
	hostIf string
	CA     *CA

	mu   sync.Mutex
	next byte
}

// NewWorld makes the namespace and its veth; everything goes when t ends.
func NewWorld(t testing.TB) *World {
	t.Helper()
	testenv.NeedRoot(t, "egress proxy tests")
	var x [1]byte
	rand.Read(x[:])
	w := &World{t: t, Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, x[0], 0}), 24), next: 2, CA: NewCA(t)}
	w.host = netip.AddrFrom4([4]byte{198, 19, x[0], 1})
	name := testenv.Name("wepx-")
	w.hostIf, w.Path = "wepxh"+name[5:], filepath.Join("/run/netns", name)
	peer := "wepxg" + name[5:]
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread ends in the new namespace: never unlocked
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		ns, err := netns.NewNamed(name)
		if err != nil {
			errc <- err
			return
		}
		ns.Close()
		errc <- netns.Set(orig)
	}()
	if err := <-errc; err != nil {
		t.Fatalf("world namespace: %v", err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(w.hostIf); err == nil {
			_ = netlink.LinkDel(l)
		}
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete world namespace: %v", err)
		}
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("world: %v", err)
		}
	}
	must(netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: w.hostIf}, PeerName: peer}))
	hl, err := netlink.LinkByName(w.hostIf)
	must(err)
	pl, err := netlink.LinkByName(peer)
	must(err)
	ns, err := netns.GetFromPath(w.Path)
	must(err)
	defer ns.Close()
	must(netlink.LinkSetNsFd(pl, int(ns)))
	must(netlink.AddrAdd(hl, &netlink.Addr{IPNet: ipNet(w.host, 24)}))
	must(netlink.LinkSetUp(hl))
	h, err := netlink.NewHandleAt(ns)
	must(err)
	defer h.Close()
	pl, err = h.LinkByName(peer)
	must(err)
	must(h.LinkSetUp(pl))
	lo, err := h.LinkByName("lo")
	must(err)
	must(h.LinkSetUp(lo))
	must(h.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Dst: ipNet(netip.IPv4Unspecified(), 0), Gw: net.IP(w.host.AsSlice()), Flags: int(netlink.FLAG_ONLINK)}))
	return w
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, 32)}
}

// Addr gives the world a new address and returns it.
func (w *World) Addr() netip.Addr {
	w.t.Helper()
	w.mu.Lock()
	n := w.next
	w.next++
	w.mu.Unlock()
	b := w.Prefix.Addr().As4()
	b[3] = n
	a := netip.AddrFrom4(b)
	ns, err := netns.GetFromPath(w.Path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		w.t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		w.t.Fatal(err)
	}
	for _, l := range links {
		if l.Attrs().Name != "lo" {
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipNet(a, 24)}); err != nil {
				w.t.Fatal(err)
			}
		}
	}
	return a
}

// Listen opens a listener inside the world (network "tcp4" or "udp4").
func (w *World) Listen(network, addr string) (any, error) {
	var out any
	err := InNS(w.Path, func() error {
		var err error
		if network == "udp4" {
			out, err = net.ListenPacket(network, addr)
		} else {
			out, err = net.Listen(network, addr)
		}
		return err
	})
	return out, err
}

// InNS runs fn on an OS thread inside the namespace at path; the thread
// is discarded afterwards. Sockets fn makes stay in that namespace.
func InNS(path string, fn func() error) error {
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

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte
	Pool *x509.CertPool
}

// NewCA makes a CA.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egress proxy test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, Pool: pool, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf issues a server certificate for names.
func (ca *CA) Leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// String names the world for logs.
func (w *World) String() string { return fmt.Sprintf("world %s (%s)", w.Path, w.Prefix) }
