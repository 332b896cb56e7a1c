package egressproxy

import (
	"net/netip"
	"slices"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/netslot"
)

// The reasons of a decision: the label values of the metrics and the
// egress log's reason field (a fixed set).
const (
	ReasonName           = "allowed_name"        // SNI/Host matched allowOut and resolves to the address dialled
	ReasonCIDR           = "allowed_cidr"        // the address is in allowOut
	ReasonDefault        = "allowed_default"     // internet on, not in denyOut
	ReasonBlocked        = "denied_blocked"      // private, loopback, link-local, the host's own, ...: never reached
	ReasonDenyOut        = "denied_cidr"         // the address is in denyOut
	ReasonClosed         = "denied_default"      // internet off (or denyOut 0.0.0.0/0) and nothing allowed it
	ReasonNameMismatch   = "denied_mismatch"     // the name does not resolve to the address dialled
	ReasonProxyFailed    = "failed_proxy"        // the egressProxy could not be reached or refused
	ReasonUpstreamFailed = "failed_upstream"     // the destination could not be connected to
	ReasonUpdated        = "cut_by_update"       // an update of the rules no longer allows it
	ReasonDNSName        = "allowed_dns"         // a DNS question answered
	ReasonDNSDenied      = "denied_dns"          // a DNS question refused (name not allowed)
	ReasonUpstreamTLS    = "failed_upstream_tls" // the destination's certificate did not verify
)

// decision is what the proxy does with one connection.
type decision struct {
	allow  bool
	reason string
	// byName: allowed because of the name (a SOCKS proxy then gets the
	// name, not the address).
	byName bool
	// transform, when set, is applied to the connection's HTTPS requests.
	transform *egressrules.Transform
}

// verdict decides a connection to dst with name ("" when the connection
// named none) under pol. resolves reports whether name resolves to
// dst's address; it is asked only when the answer matters.
func verdict(pol netslot.Policy, upstream *egress.Policy, dst netip.AddrPort, name string, resolves func() bool) decision {
	if upstream.Check(dst) != nil {
		return decision{reason: ReasonBlocked}
	}
	rules := pol.Egress
	var d decision
	mismatch := false
	if t, ok := rules.TransformFor(name); ok {
		// A secret goes only to the name's own address.
		if !resolves() {
			return decision{reason: ReasonNameMismatch}
		}
		d.transform = &t
	}
	if rules.AllowsName(name) {
		if d.transform != nil || resolves() {
			d.allow, d.reason, d.byName = true, ReasonName, true
			return d
		}
		mismatch = true
	}
	a := dst.Addr()
	switch {
	case inAny(pol.AllowOut, a):
		d.allow, d.reason = true, ReasonCIDR
	case inAny(pol.DenyOut, a):
		d.reason = ReasonDenyOut
	case !pol.Internet:
		d.reason = ReasonClosed
	default:
		d.allow, d.reason = true, ReasonDefault
	}
	if !d.allow {
		d.transform = nil
		if mismatch {
			d.reason = ReasonNameMismatch
		}
	}
	return d
}

func inAny(ps []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

// needsName reports whether decisions under pol depend on the name a
// connection carries (so the proxy reads its first bytes).
func needsName(pol netslot.Policy) bool {
	r := pol.Egress
	return r != nil && (len(r.Hosts) > 0 || len(r.Transforms) > 0)
}

// openByDefault reports whether pol lets some public address be reached
// without a name: internet on and denyOut not covering every IPv4
// address. Only then are DNS questions for names no rule names forwarded
// (a closed sandbox could otherwise send data out in the questions).
func openByDefault(pol netslot.Policy) bool {
	return pol.Internet && !coversAll(pol.DenyOut)
}

// coversAll reports whether the union of ps is all of IPv4.
func coversAll(ps []netip.Prefix) bool {
	type span struct{ lo, hi uint64 } // [lo, hi)
	var spans []span
	for _, p := range ps {
		if !p.Addr().Is4() {
			continue
		}
		b := p.Masked().Addr().As4()
		lo := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
		spans = append(spans, span{lo, lo + 1<<(32-p.Bits())})
	}
	slices.SortFunc(spans, func(x, y span) int {
		switch {
		case x.lo < y.lo:
			return -1
		case x.lo > y.lo:
			return 1
		}
		return 0
	})
	var end uint64
	for _, s := range spans {
		if s.lo > end {
			return false
		}
		end = max(end, s.hi)
	}
	return end >= 1<<32
}
