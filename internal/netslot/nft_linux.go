package netslot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The pool's nftables layout (one inet table):
//
//	input (hook input):     from a sandbox veth: established/related accept,
//	                        what a slot's redirect sent to its egress proxy
//	                        listeners ("ct status dnat" to an address of
//	                        the pool) accept, HostAllowed accept,
//	                        everything else rejected (the host's own
//	                        addresses, the gateway included)
//	forward (hook forward): "iifname vmap @slots" jumps to the slot's chain
//	                        (one map element per slot, O(1) to add and
//	                        remove); any other sandbox veth rejected (fail
//	                        closed);
//	                        to a sandbox veth only established/related
//	prerouting (nat):       "iifname vmap @nat_slots" jumps to the slot's
//	                        nat chain
//	postrouting (nat):      masquerade what leaves the pool's CIDR
//	always_blocked:         reject the always-blocked destinations
//	slot-<id>-<veth>:       non-IPv4 drop, spoofed source drop, [behind the
//	                        egress proxy: new connections rejected], DenyOut
//	                        reject, HostAllowed accept, jump always_blocked,
//	                        AllowOut accept, then accept (Internet) or reject
//	nat-<id>-<veth>:        behind the egress proxy, once redirected: DNS
//	                        (UDP and TCP port 53) and every other TCP
//	                        connection DNAT to the slot's proxy listeners
const (
	chainInput       = "input"
	chainForward     = "forward"
	chainPrerouting  = "prerouting"
	chainPostrouting = "postrouting"
	chainBlocked     = "always_blocked"
	mapSlots         = "slots"     // host veth name -> jump to the slot chain
	mapNat           = "nat_slots" // host veth name -> jump to the nat chain
)

func (p *pool) slotsMap() *nftables.Set {
	return &nftables.Set{Table: p.table(), Name: mapSlots, IsMap: true,
		KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

func (p *pool) natMap() *nftables.Set {
	return &nftables.Set{Table: p.table(), Name: mapNat, IsMap: true,
		KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

// ifKey is an interface name as a set key: NUL-padded to IFNAMSIZ.
func ifKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func (p *pool) table() *nftables.Table {
	return &nftables.Table{Name: p.cfg.Table, Family: nftables.TableFamilyINet}
}

func (p *pool) chain(name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: p.table()}
}

// ifname matches the input or output interface name; a wildcard matches a
// name prefix.
func ifname(key expr.MetaKey, name string, wildcard bool, op expr.CmpOp) []expr.Any {
	data := []byte(name)
	if !wildcard {
		data = make([]byte, unix.IFNAMSIZ)
		copy(data, name)
	}
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: data},
	}
}

func isIPv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

func notIPv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

// ipMatch matches the IPv4 source (src) or destination against a prefix.
// The packet must be known to be IPv4.
func ipMatch(src bool, pfx netip.Prefix, op expr.CmpOp) []expr.Any {
	off := uint32(16)
	if src {
		off = 12
	}
	pfx = pfx.Masked()
	if pfx.Bits() == 0 {
		if op == expr.CmpOpEq {
			return nil // matches everything
		}
	}
	a := pfx.Addr().As4()
	out := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4}}
	if pfx.Bits() < 32 {
		mask := make([]byte, 4)
		binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-pfx.Bits()))
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}})
	}
	return append(out, &expr.Cmp{Op: op, Register: 1, Data: a[:]})
}

// ipsDstNAT is the conntrack status bit IPS_DST_NAT (linux
// nf_conntrack_common.h).
const ipsDstNAT = 1 << 5

// ctDNAT matches a connection whose destination a nat rule changed.
func ctDNAT() []expr.Any {
	bits := make([]byte, 4)
	binary.NativeEndian.PutUint32(bits, ipsDstNAT)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: bits, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

// ctNew matches the first packet of a connection.
func ctNew() []expr.Any {
	bits := make([]byte, 4)
	binary.NativeEndian.PutUint32(bits, expr.CtStateBitNEW)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: bits, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

// l4 matches the transport protocol, and with port > 0 its destination
// port.
func l4(proto byte, port uint16) []expr.Any {
	out := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
	if port > 0 {
		out = append(out,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)})
	}
	return out
}

// dnatTo rewrites the destination to addr:port.
func dnatTo(addr netip.Addr, port uint16) []expr.Any {
	a := addr.As4()
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: a[:]},
		&expr.Immediate{Register: 2, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

func ctEstablished() []expr.Any {
	bits := make([]byte, 4)
	binary.NativeEndian.PutUint32(bits, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: bits, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

func accept() expr.Any { return &expr.Verdict{Kind: expr.VerdictAccept} }
func drop() expr.Any   { return &expr.Verdict{Kind: expr.VerdictDrop} }

// rejects are two rules that refuse what match matches: TCP with a reset
// and everything else with ICMP "administratively prohibited", so that a
// sandbox's connection fails at once instead of hanging (ICMP errors are
// rate-limited by the kernel; resets are not).
func rejects(match []expr.Any) [][]expr.Any {
	return [][]expr.Any{
		cat(match, []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
		}),
		cat(match, one(&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})),
	}
}

func jump(chain string) expr.Any { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func one(e expr.Any) []expr.Any { return []expr.Any{e} }

// setupBase (re)creates the table and its base chains in one transaction.
// Slot chains are kept, but the jumps to them are flushed with the forward
// chain, so slots not yet adopted again are cut off (fail closed).
func (p *pool) setupBase() error {
	c := p.nft
	t := c.AddTable(p.table())
	accPolicy := nftables.ChainPolicyAccept
	input := c.AddChain(&nftables.Chain{Name: chainInput, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accPolicy})
	forward := c.AddChain(&nftables.Chain{Name: chainForward, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accPolicy})
	post := c.AddChain(&nftables.Chain{Name: chainPostrouting, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accPolicy})
	pre := c.AddChain(&nftables.Chain{Name: chainPrerouting, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accPolicy})
	blocked := c.AddChain(&nftables.Chain{Name: chainBlocked, Table: t})
	for _, ch := range []*nftables.Chain{input, forward, pre, post, blocked} {
		c.FlushChain(ch)
	}
	slots := p.slotsMap()
	// An ID of our own (it only names the set inside this transaction)
	// keeps AddSet off the library's unsynchronised global ID counter.
	slots.ID = 1
	if err := c.AddSet(slots, nil); err != nil {
		return fmt.Errorf("nftables map %s: %w", mapSlots, err)
	}
	c.FlushSet(slots)
	nat := p.natMap()
	nat.ID = 2
	if err := c.AddSet(nat, nil); err != nil {
		return fmt.Errorf("nftables map %s: %w", mapNat, err)
	}
	c.FlushSet(nat)
	wild := p.cfg.hostVethWildcard()
	add := func(ch *nftables.Chain, e []expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e})
	}
	addRejects := func(ch *nftables.Chain, match []expr.Any) {
		for _, r := range rejects(match) {
			add(ch, r)
		}
	}

	add(input, cat(ifname(expr.MetaKeyIIFNAME, wild, true, expr.CmpOpEq), ctEstablished(), one(accept())))
	// Only a slot's own nat chain redirects its guest (to the slot's
	// proxy listeners, on its host address): a guest cannot make a
	// connection "dnat" by itself. The destination must be in the pool
	// (a slot's host address): another table's DNAT to one of the host's
	// other addresses does not open the host to guests.
	add(input, cat(ifname(expr.MetaKeyIIFNAME, wild, true, expr.CmpOpEq), ctDNAT(), isIPv4(),
		ipMatch(false, p.cfg.CIDR, expr.CmpOpEq), one(accept())))
	for _, h := range p.cfg.HostAllowed {
		add(input, cat(ifname(expr.MetaKeyIIFNAME, wild, true, expr.CmpOpEq), isIPv4(), ipMatch(false, h, expr.CmpOpEq), one(accept())))
	}
	addRejects(input, ifname(expr.MetaKeyIIFNAME, wild, true, expr.CmpOpEq))

	add(forward, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: slots.Name, SetID: slots.ID, IsDestRegSet: true, DestRegister: 0},
	})
	addRejects(forward, ifname(expr.MetaKeyIIFNAME, wild, true, expr.CmpOpEq))
	add(forward, cat(ifname(expr.MetaKeyOIFNAME, wild, true, expr.CmpOpEq), ctEstablished(), one(accept())))
	add(forward, cat(ifname(expr.MetaKeyOIFNAME, wild, true, expr.CmpOpEq), one(drop())))

	add(pre, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: nat.Name, SetID: nat.ID, IsDestRegSet: true, DestRegister: 0},
	})
	add(post, cat(isIPv4(), ipMatch(true, p.cfg.CIDR, expr.CmpOpEq),
		ifname(expr.MetaKeyOIFNAME, wild, true, expr.CmpOpNeq), one(&expr.Masq{})))

	for _, b := range append(append([]netip.Prefix{}, alwaysBlocked...), p.cfg.CIDR) {
		addRejects(blocked, ipMatch(false, b, expr.CmpOpEq))
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables table %q: %w", p.cfg.Table, err)
	}
	return nil
}

// slotRules are the egress rules of one slot.
func (p *pool) slotRules(s *Slot, pol Policy) [][]expr.Any {
	guest := netip.PrefixFrom(s.GuestIP, 32)
	rules := [][]expr.Any{
		cat(notIPv4(), one(drop())),
		cat(ipMatch(true, guest, expr.CmpOpNeq), one(drop())),
	}
	if pol.Egress != nil {
		// Behind the egress proxy nothing new is forwarded: TCP and DNS
		// go to the proxy (natRules), other UDP (QUIC among it), ICMP and
		// the rest are refused. Connections made before keep the lists.
		rules = append(rules, rejects(ctNew())...)
	}
	for _, d := range pol.DenyOut {
		rules = append(rules, rejects(ipMatch(false, d, expr.CmpOpEq))...)
	}
	for _, h := range p.cfg.HostAllowed {
		rules = append(rules, cat(ipMatch(false, h, expr.CmpOpEq), one(accept())))
	}
	rules = append(rules, one(jump(chainBlocked)))
	for _, a := range pol.AllowOut {
		rules = append(rules, cat(ipMatch(false, a, expr.CmpOpEq), one(accept())))
	}
	if pol.Internet {
		rules = append(rules, one(accept()))
	} else {
		rules = append(rules, rejects(nil)...)
	}
	return rules
}

// natRules are the redirects of one slot: none until it is behind the
// egress proxy with its listeners' ports set.
func natRules(s *Slot, pol Policy) [][]expr.Any {
	r := pol.Redirect
	if pol.Egress == nil || r == nil {
		return nil
	}
	return [][]expr.Any{
		cat(isIPv4(), l4(unix.IPPROTO_UDP, 53), dnatTo(s.HostIP, r.DNSUDP)),
		cat(isIPv4(), l4(unix.IPPROTO_TCP, 53), dnatTo(s.HostIP, r.DNSTCP)),
		cat(isIPv4(), l4(unix.IPPROTO_TCP, 0), dnatTo(s.HostIP, r.TCP)),
	}
}

// applySlot creates or replaces the slot's chains and, with addJump, the
// map elements that jump to them, in one transaction.
func (p *pool) applySlot(s *Slot, pol Policy, addJump bool) error {
	c := p.nft
	t := p.table()
	ch := c.AddChain(&nftables.Chain{Name: slotChain(s.SandboxID, s.HostVeth), Table: t})
	c.FlushChain(ch)
	for _, r := range p.slotRules(s, pol) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r})
	}
	nat := c.AddChain(&nftables.Chain{Name: natChain(s.SandboxID, s.HostVeth), Table: t})
	c.FlushChain(nat)
	for _, r := range natRules(s, pol) {
		c.AddRule(&nftables.Rule{Table: t, Chain: nat, Exprs: r})
	}
	if addJump {
		for set, chain := range map[*nftables.Set]string{p.slotsMap(): ch.Name, p.natMap(): nat.Name} {
			err := c.SetAddElements(set, []nftables.SetElement{{
				Key:         ifKey(s.HostVeth),
				VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: chain},
			}})
			if err != nil {
				return fmt.Errorf("nftables slot %s: %w", chain, err)
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables slot %s: %w", ch.Name, err)
	}
	return nil
}

// removeSlot deletes the slot's map element and chain; missing is not an
// error.
func (p *pool) removeSlot(id, hostVeth string) error {
	elem := []nftables.SetElement{{Key: ifKey(hostVeth)}}
	for _, set := range []*nftables.Set{p.slotsMap(), p.natMap()} {
		if err := p.nft.SetDeleteElements(set, elem); err != nil {
			return err
		}
		if err := p.nft.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("nftables delete map element %s: %w", hostVeth, err)
		}
	}
	for _, name := range []string{slotChain(id, hostVeth), natChain(id, hostVeth)} {
		p.nft.FlushChain(p.chain(name))
		p.nft.DelChain(p.chain(name))
		if err := p.nft.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("nftables delete chain %s: %w", name, err)
		}
	}
	return nil
}

// slotChains lists the slot chains of the table, one per slot: its
// "slot-" chain, or its "nat-" chain when that is all that is left.
func (p *pool) slotChains() ([]string, error) {
	chains, err := p.nft.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("nftables list chains: %w", err)
	}
	var out []string
	seen := map[string]bool{}
	for _, ch := range chains {
		if ch.Table.Name == p.cfg.Table && strings.HasPrefix(ch.Name, "slot-") {
			id, veth, _ := parseSlotChain(ch.Name)
			seen[id+"/"+veth] = true
			out = append(out, ch.Name)
		}
	}
	for _, ch := range chains {
		if ch.Table.Name == p.cfg.Table && strings.HasPrefix(ch.Name, "nat-") {
			if id, veth, ok := parseSlotChain(ch.Name); ok && !seen[id+"/"+veth] {
				out = append(out, ch.Name)
			}
		}
	}
	return out, nil
}
