package egressproxy

import (
	"net/netip"
	"testing"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/netslot"
)

func TestCoversAll(t *testing.T) {
	t.Parallel()
	p := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	for _, c := range []struct {
		ps   []netip.Prefix
		want bool
	}{
		{p("0.0.0.0/0"), true},
		{p("0.0.0.0/1", "128.0.0.0/1"), true},
		{p("128.0.0.0/1", "0.0.0.0/2", "64.0.0.0/2"), true},
		{p("0.0.0.0/1"), false},
		{p("0.0.0.0/1", "128.0.0.0/2"), false},
		{nil, false},
	} {
		if got := coversAll(c.ps); got != c.want {
			t.Errorf("coversAll(%v) = %v", c.ps, got)
		}
	}
}

func TestVerdict(t *testing.T) {
	t.Parallel()
	pub := netip.MustParseAddrPort("198.51.100.7:443")
	up := egress.MustParse("198.51.100.0/24")
	yes := func() bool { return true }
	no := func() bool { return false }
	rules := &egressrules.Rules{Hosts: []string{"api.example.com"}, Transforms: []egressrules.Transform{{Host: "t.example.com"}}}
	closedPol := netslot.Policy{Egress: rules}
	openPol := netslot.Policy{Internet: true, Egress: rules}
	for _, c := range []struct {
		name      string
		pol       netslot.Policy
		dst       netip.AddrPort
		host      string
		resolves  func() bool
		allow     bool
		reason    string
		transform bool
	}{
		{"name resolves", closedPol, pub, "api.example.com", yes, true, ReasonName, false},
		{"name elsewhere, closed", closedPol, pub, "api.example.com", no, false, ReasonNameMismatch, false},
		{"name elsewhere, open", openPol, pub, "api.example.com", no, true, ReasonDefault, false},
		{"no name, closed", closedPol, pub, "", no, false, ReasonClosed, false},
		{"private never", netslot.Policy{Internet: true, AllowOut: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Egress: rules}, netip.MustParseAddrPort("10.1.1.1:80"), "api.example.com", yes, false, ReasonBlocked, false},
		{"allowOut CIDR over deny", netslot.Policy{AllowOut: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/32")}, DenyOut: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}, pub, "", nil, true, ReasonCIDR, false},
		{"denyOut", netslot.Policy{Internet: true, DenyOut: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}, pub, "", nil, false, ReasonDenyOut, false},
		{"transform, resolves, open", openPol, pub, "t.example.com", yes, true, ReasonDefault, true},
		{"transform, elsewhere", openPol, pub, "t.example.com", no, false, ReasonNameMismatch, false},
		{"transform does not grant", closedPol, pub, "t.example.com", yes, false, ReasonClosed, false},
	} {
		d := verdict(c.pol, up, c.dst, c.host, c.resolves)
		if d.allow != c.allow || d.reason != c.reason || (d.transform != nil) != c.transform {
			t.Errorf("%s: %+v", c.name, d)
		}
	}
}
