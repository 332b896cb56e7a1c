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

	"github.com/warren-sandbox/warren/internal/sandbox"
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

// Policy is a sandbox's egress policy. The type is the shared domain
// type sandbox.NetworkPolicy, so that the node contract and the control
// plane speak of it without linking this package (nor nftables, nor
// netlink).
type Policy = sandbox.NetworkPolicy

// Redirect are the ports on a slot's host address where its guest's
// connections are sent (sandbox.EgressRedirect).
type Redirect = sandbox.EgressRedirect
