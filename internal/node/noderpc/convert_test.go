package noderpc

import (
	"net/netip"
	"testing"

	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// TestPolicyRoundTrip: egress rules cross the node wire whole; the
// node-local redirect does not.
func TestPolicyRoundTrip(t *testing.T) {
	t.Parallel()
	p := sandbox.NetworkPolicy{
		Internet: true, AllowOut: []netip.Prefix{netip.MustParsePrefix("1.2.3.4/32")},
		Egress: &egressrules.Rules{Hosts: []string{"a.example", "*.b.example"},
			Transforms: []egressrules.Transform{{Host: "a.example", Headers: map[string]string{"Authorization": "Bearer x"}}},
			Proxy:      &egressrules.Proxy{Address: "p.example:1080", Username: "u", Password: "pw"}},
		Redirect: &sandbox.EgressRedirect{TCP: 1, DNSUDP: 2, DNSTCP: 3},
	}
	got, err := PolicyFromProto(PolicyToProto(p))
	if err != nil {
		t.Fatal(err)
	}
	want := p.Clone()
	want.Redirect = nil
	if !got.Equal(want) {
		t.Fatalf("round trip: %+v (egress %+v), want %+v", got, got.Egress, want)
	}
	if got, _ := PolicyFromProto(PolicyToProto(sandbox.NetworkPolicy{})); got.Egress != nil {
		t.Fatalf("no egress rules became %+v", got.Egress)
	}
}
