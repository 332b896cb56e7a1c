package sandbox

import "net/netip"

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
}
