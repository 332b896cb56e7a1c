// Package netslot gives each sandbox its own network: a network namespace, a
// veth pair to the host, an address pair from a configurable pool (default
// 100.65.0.0/16), outbound NAT when internet access is on, and firewall rules
// that always block RFC 1918 ranges, link-local addresses (the cloud
// metadata address among them), the host's own addresses and other
// sandboxes, plus per-sandbox allow/deny CIDR lists that can be replaced
// while the sandbox runs.
//
// Slots are pooled: a released slot's address pair is reused, but host
// object names (netns, veth) are unique per use, because the kernel destroys
// a network namespace asynchronously.
package netslot

import (
	"context"
	"net/netip"
	"slices"

	"github.com/warren-sandbox/warren/internal/egressrules"
)

// LegacyNetNSDir is where Warren mounted its namespaces before each pool
// had a directory of its own (Config.NetNSDir): iproute2's /run/netns.
// Slots recorded there are still adopted and released, and leaked
// namespaces of the pool there are still reclaimed.
const LegacyNetNSDir = "/run/netns"

// Pool hands out network slots.
type Pool interface {
	// Acquire creates a slot for sandbox id: namespace "sbx-<id>-<n>",
	// veth pair, addresses, routes and rules.
	Acquire(ctx context.Context, id string, policy Policy) (*Slot, error)
	// Release destroys the slot's host objects and returns its addresses to
	// the pool. Releasing twice is not an error.
	Release(ctx context.Context, s *Slot) error
	// Update replaces the egress policy of a live slot.
	Update(ctx context.Context, s *Slot, policy Policy) error
	// Adopt takes back a slot recorded before a node agent restart.
	Adopt(ctx context.Context, s *Slot) error
	// ReclaimLeaked deletes host network objects (namespaces, veths, rules)
	// that carry Warren's names but belong to no sandbox in keep (keyed by
	// sandbox ID), and returns how many it deleted.
	ReclaimLeaked(ctx context.Context, keep map[string]bool) (int, error)
}

// Slot is one sandbox's network. It is persisted by the node agent (JSON) so
// that a restarted agent can adopt it.
type Slot struct {
	SandboxID string     `json:"sandboxId"`
	Index     int        `json:"index"`     // position in the address pool
	NetNS     string     `json:"netns"`     // namespace name
	NetNSPath string     `json:"netnsPath"` // Config.NetNSDir/<name>
	HostVeth  string     `json:"hostVeth"`
	GuestVeth string     `json:"guestVeth"`
	HostIP    netip.Addr `json:"hostIp"`  // host end of the veth (the guest's gateway)
	GuestIP   netip.Addr `json:"guestIp"` // the sandbox's address, reachable from the host
	Prefix    int        `json:"prefix"`
	// Policy is the egress policy in force; Acquire and Update set it, and
	// Adopt re-applies it.
	Policy Policy `json:"policy"`
}

// Policy is a sandbox's egress policy.
type Policy struct {
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
	Redirect *Redirect `json:"redirect,omitempty"`
}

// Redirect are the ports on a slot's host address where its guest's
// connections are sent (DNAT): TCP to the egress proxy, DNS over UDP and
// TCP to the proxy's resolver.
type Redirect struct {
	TCP    uint16 `json:"tcp"`
	DNSUDP uint16 `json:"dnsUdp"`
	DNSTCP uint16 `json:"dnsTcp"`
}

// Clone returns a deep copy of p.
func (p Policy) Clone() Policy {
	out := Policy{Internet: p.Internet, AllowOut: slices.Clone(p.AllowOut), DenyOut: slices.Clone(p.DenyOut), Egress: p.Egress.Clone()}
	if p.Redirect != nil {
		r := *p.Redirect
		out.Redirect = &r
	}
	return out
}

// Equal reports whether p and o are the same policy.
func (p Policy) Equal(o Policy) bool {
	return p.Internet == o.Internet && slices.Equal(p.AllowOut, o.AllowOut) && slices.Equal(p.DenyOut, o.DenyOut) &&
		p.Egress.Equal(o.Egress) && ((p.Redirect == nil) == (o.Redirect == nil)) && (p.Redirect == nil || *p.Redirect == *o.Redirect)
}

// View is p as shown outside the node: the egress rules' header values
// and proxy password redacted, no redirect.
func (p Policy) View() Policy {
	out := p.Clone()
	out.Egress = p.Egress.Redact()
	out.Redirect = nil
	return out
}
