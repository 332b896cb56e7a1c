package sandbox

import (
	"net/netip"
	"slices"

	"github.com/warren-sandbox/warren/internal/egressrules"
)

// NetworkPolicy is a sandbox's egress policy: what the control plane asks
// for on create and on a network update, what the node's network slot
// (internal/netslot) enforces and records.
type NetworkPolicy struct {
	// Internet enables outbound NAT to addresses not otherwise blocked.
	Internet bool `json:"internet"`
	// AllowOut lists CIDRs that are reachable even when Internet is off.
	// They never open the always-blocked ranges.
	AllowOut []netip.Prefix `json:"allowOut,omitempty"`
	// DenyOut lists CIDRs that are unreachable even when Internet is on.
	DenyOut []netip.Prefix `json:"denyOut,omitempty"`
	// Egress, when set, puts the slot behind the host's egress proxy: no
	// new connection of the guest is forwarded (its established ones keep
	// the lists above), and once Redirect is set its TCP and its DNS go
	// to the proxy, which decides by these rules and the lists above.
	Egress *egressrules.Rules `json:"egress,omitempty"`
	// Redirect are the ports of the slot's proxy listeners on its host
	// address; the node's egress proxy sets it (never the control plane).
	Redirect *EgressRedirect `json:"redirect,omitempty"`
}

// EgressRedirect are the ports on a slot's host address where its
// guest's connections are sent (DNAT): TCP to the egress proxy, DNS over
// UDP and TCP to the proxy's resolver.
type EgressRedirect struct {
	TCP    uint16 `json:"tcp"`
	DNSUDP uint16 `json:"dnsUdp"`
	DNSTCP uint16 `json:"dnsTcp"`
}

// Clone returns a deep copy of p.
func (p NetworkPolicy) Clone() NetworkPolicy {
	out := NetworkPolicy{Internet: p.Internet, AllowOut: slices.Clone(p.AllowOut), DenyOut: slices.Clone(p.DenyOut), Egress: p.Egress.Clone()}
	if p.Redirect != nil {
		r := *p.Redirect
		out.Redirect = &r
	}
	return out
}

// Equal reports whether p and o are the same policy.
func (p NetworkPolicy) Equal(o NetworkPolicy) bool {
	return p.Internet == o.Internet && slices.Equal(p.AllowOut, o.AllowOut) && slices.Equal(p.DenyOut, o.DenyOut) &&
		p.Egress.Equal(o.Egress) && ((p.Redirect == nil) == (o.Redirect == nil)) && (p.Redirect == nil || *p.Redirect == *o.Redirect)
}

// View is p as shown outside the node: the egress rules' header values
// and proxy password redacted, no redirect.
func (p NetworkPolicy) View() NetworkPolicy {
	out := p.Clone()
	out.Egress = p.Egress.Redact()
	out.Redirect = nil
	return out
}
