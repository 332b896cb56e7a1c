package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func TestPublic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ip     string
		public bool
	}{
		{"1.1.1.1", true},
		{"8.8.4.4", true},
		{"2606:4700::1111", true},
		{"127.0.0.1", false},
		{"127.1.2.3", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"100.64.0.1", false},      // CGNAT
		{"100.65.3.2", false},      // the sandboxes' default network
		{"198.18.0.1", false},
		{"198.19.255.254", false},
		{"0.0.0.0", false},
		{"255.255.255.255", false},
		{"224.0.0.1", false},
		{"::1", false},
		{"::", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:1.1.1.1", true},
		{"::127.0.0.1", false}, // IPv4-compatible
		{"fe80::1", false},
		{"fd00::1", false},
		{"fc00::1", false},
		{"fec0::1", false},
		{"ff02::1", false},
		{"64:ff9b::7f00:1", false}, // NAT64 of 127.0.0.1
		{"64:ff9b::101:101", true}, // NAT64 of 1.1.1.1
		{"2002:7f00:1::1", false},  // 6to4 of 127.0.0.1
		{"2002:a00:1::1", false},   // 6to4 of 10.0.0.1
		{"2001::1", false},         // Teredo
	} {
		if got := Public(netip.MustParseAddr(tc.ip)); got != tc.public {
			t.Errorf("Public(%s) = %t, want %t", tc.ip, got, tc.public)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", "nope", "10.0.0.0/33", "host:", ":80", "host:0", "host:99999", "host:http"} {
		if _, err := Parse([]string{bad}); !errdefs.IsInvalid(err) {
			t.Errorf("Parse(%q) = %v, want invalid", bad, err)
		}
	}
	p := MustParse("10.0.0.0/8", "192.168.1.5", "127.0.0.1:5000", "[::1]:6000", "Registry.Internal:443")
	if p.Entries() != 5 {
		t.Fatalf("entries = %d", p.Entries())
	}
	for _, tc := range []struct {
		ap string
		ok bool
	}{
		{"10.9.8.7:22", true},
		{"192.168.1.5:80", true},
		{"192.168.1.6:80", false},
		{"127.0.0.1:5000", true},
		{"127.0.0.1:5001", false},
		{"[::ffff:127.0.0.1]:5000", true},
		{"[::1]:6000", true},
		{"[::1]:6001", false},
	} {
		err := p.Check(netip.MustParseAddrPort(tc.ap))
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, errdefs.ErrForbidden) {
			t.Errorf("Check(%s) = %v, want allowed %t", tc.ap, err, tc.ok)
		}
	}
	if !p.allowedHost("registry.internal:443") || p.allowedHost("registry.internal:444") {
		t.Error("host:port entries")
	}
}

// TestHostAddresses: the host's own (public) addresses are refused too.
func TestHostAddresses(t *testing.T) {
	t.Parallel()
	p := MustParse()
	p.hostAddrs = func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("8.8.8.8")}, nil }
	if err := p.Check(netip.MustParseAddrPort("8.8.8.8:443")); !Refused(err) {
		t.Fatalf("own address: %v", err)
	}
	if err := p.Check(netip.MustParseAddrPort("[::ffff:8.8.8.8]:443")); !Refused(err) {
		t.Fatalf("own address, mapped: %v", err)
	}
	if err := p.Check(netip.MustParseAddrPort("1.1.1.1:443")); err != nil {
		t.Fatalf("public address: %v", err)
	}
	p.hostAddrs = func() ([]netip.Addr, error) { return nil, errors.New("no interfaces") }
	if err := p.Check(netip.MustParseAddrPort("1.1.1.1:443")); !Refused(err) {
		t.Fatalf("unknown host addresses must fail closed: %v", err)
	}
}

// listener counts the connections it accepts.
func listener(t *testing.T) (addr string, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Write([]byte("x"))
			c.Close()
		}
	}()
	return ln.Addr().String(), accepted
}

// TestDialRefusesLoopback is the attack: a tenant names 127.0.0.1 (or a
// name resolving to it); the host must not connect. Only the operator's
// allow entry opens it.
func TestDialRefusesLoopback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addr, accepted := listener(t)
	_, port, _ := net.SplitHostPort(addr)
	for _, target := range []string{addr, "localhost:" + port, "[::ffff:127.0.0.1]:" + port} {
		d := &Dialer{}
		if c, err := d.DialContext(ctx, "tcp", target); !Refused(err) {
			if c != nil {
				c.Close()
			}
			t.Errorf("dial %s without an allow entry: %v, want refused", target, err)
		}
	}
	if _, err := (&Dialer{}).DialContext(ctx, "udp", "1.1.1.1:53"); !Refused(err) {
		t.Errorf("udp: %v", err)
	}
	for _, entry := range []string{addr, "127.0.0.0/8", "localhost:" + port} {
		d := &Dialer{Policy: MustParse(entry)}
		target := addr
		if strings.HasPrefix(entry, "localhost") {
			target = "localhost:" + port
		}
		c, err := d.DialContext(ctx, "tcp4", target)
		if err != nil {
			t.Errorf("dial %s allowed by %q: %v", target, entry, err)
			continue
		}
		c.Read(make([]byte, 1)) // accepted and counted
		c.Close()
	}
	// An entry for another port does not open this one.
	if _, err := (&Dialer{Policy: MustParse("127.0.0.1:1")}).DialContext(ctx, "tcp", addr); !Refused(err) {
		t.Errorf("dial with another port allowed: %v", err)
	}
	// Only the three allowed connections reached the listener.
	if n := accepted.Load(); n != 3 {
		t.Fatalf("listener accepted %d connections, want 3", n)
	}
}

// TestTransport: an HTTP request through the transport never reaches a
// loopback server, and the error a tenant sees says why without the
// server's answer.
func TestTransport(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(500)
		w.Write([]byte("internal secret"))
	}))
	t.Cleanup(srv.Close)
	c := &http.Client{Transport: (&Dialer{}).Transport()}
	_, err := c.Get(srv.URL)
	if !Refused(err) || hits.Load() != 0 {
		t.Fatalf("GET loopback: %v, hits %d", err, hits.Load())
	}
	if msg := Describe(err); !strings.Contains(msg, "egress policy") || strings.Contains(msg, "127.0.0.1") {
		t.Fatalf("Describe = %q", msg)
	}
	c = &http.Client{Transport: (&Dialer{Policy: MustParse(strings.TrimPrefix(srv.URL, "http://"))}).Transport()}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if hits.Load() != 1 {
		t.Fatalf("allowed request: hits %d", hits.Load())
	}
}
