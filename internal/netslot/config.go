package netslot

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Config configures a Pool. The zero value is completed with defaults by
// NewPool.
type Config struct {
	// CIDR is the IPv4 range that slots are cut from; default 100.65.0.0/16.
	CIDR netip.Prefix
	// SlotPrefixLen is the prefix length of one slot: 30 (default: network,
	// host, guest, broadcast) or 31 (host and guest only).
	SlotPrefixLen int
	// HostAllowed are destinations (for example the host's DNS resolver)
	// that sandboxes may reach although they lie in an always-blocked range
	// or on the host itself. Empty by default.
	HostAllowed []netip.Prefix
	// Table is the nftables table (family inet) that holds every rule of
	// the pool; default "warren". Two pools on one host need different
	// tables, CIDRs and interface prefixes.
	Table string
	// IfPrefix starts the name of every host-side veth ("<prefix>h...");
	// 1–3 lowercase letters, default "wr".
	IfPrefix string
	// MTU of the veth pairs; default: the MTU of the interface of the
	// host's IPv4 default route (1500 without one).
	MTU int
	// NetNSDir is the directory where the pool bind-mounts its network
	// namespaces; default /run/warren/<Table>/netns. NewPool makes it a
	// shared mount point of its own (as iproute2 does for /run/netns), so
	// that other tools' mounts cannot hide the namespaces in it. Two pools
	// need different directories; the default follows the table.
	NetNSDir string
}

// DefaultCIDR is the default address pool: inside 100.64.0.0/10 (shared
// address space), outside the RFC 1918 ranges.
var DefaultCIDR = netip.MustParsePrefix("100.65.0.0/16")

// GuestIfName is the name of the sandbox's interface inside its namespace.
const GuestIfName = "eth0"

// alwaysBlocked are the destinations no sandbox reaches, whatever its
// policy: this network, RFC 1918, shared address space (other sandboxes
// among them), loopback, link-local (cloud metadata), IETF protocol
// assignments, multicast, reserved and broadcast.
var alwaysBlocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// maxSlots keeps a slot index within three base-36 digits, so that veth
// names fit the kernel's 15 characters.
const maxSlots = 36 * 36 * 36

func (c *Config) setDefaults() error {
	if !c.CIDR.IsValid() {
		c.CIDR = DefaultCIDR
	}
	c.CIDR = c.CIDR.Masked()
	if c.SlotPrefixLen == 0 {
		c.SlotPrefixLen = 30
	}
	if c.Table == "" {
		c.Table = "warren"
	}
	if c.IfPrefix == "" {
		c.IfPrefix = "wr"
	}
	if c.NetNSDir == "" {
		c.NetNSDir = filepath.Join("/run/warren", c.Table, "netns")
	}
	switch {
	case !filepath.IsAbs(c.NetNSDir) || filepath.Clean(c.NetNSDir) != c.NetNSDir || c.NetNSDir == "/":
		return fmt.Errorf("netslot netns dir %q: want a clean absolute path: %w", c.NetNSDir, errdefs.ErrInvalid)
	case c.NetNSDir == LegacyNetNSDir:
		return fmt.Errorf("netslot netns dir %q: that is iproute2's; give the pool a directory of its own: %w", c.NetNSDir, errdefs.ErrInvalid)
	case !c.CIDR.Addr().Is4():
		return fmt.Errorf("netslot CIDR %s: only IPv4: %w", c.CIDR, errdefs.ErrInvalid)
	case c.SlotPrefixLen != 30 && c.SlotPrefixLen != 31:
		return fmt.Errorf("netslot slot prefix /%d: want 30 or 31: %w", c.SlotPrefixLen, errdefs.ErrInvalid)
	case c.CIDR.Bits() > c.SlotPrefixLen:
		return fmt.Errorf("netslot CIDR %s smaller than one slot: %w", c.CIDR, errdefs.ErrInvalid)
	case c.slots() > maxSlots:
		return fmt.Errorf("netslot CIDR %s has more than %d slots: %w", c.CIDR, maxSlots, errdefs.ErrInvalid)
	case len(c.IfPrefix) > 3 || strings.Trim(c.IfPrefix, "abcdefghijklmnopqrstuvwxyz") != "":
		return fmt.Errorf("netslot interface prefix %q: 1-3 lowercase letters: %w", c.IfPrefix, errdefs.ErrInvalid)
	case c.MTU != 0 && (c.MTU < 576 || c.MTU > 65535):
		return fmt.Errorf("netslot MTU %d: %w", c.MTU, errdefs.ErrInvalid)
	case strings.ContainsAny(c.Table, "/ \x00") || len(c.Table) > 64:
		return fmt.Errorf("netslot table %q: %w", c.Table, errdefs.ErrInvalid)
	}
	for _, p := range c.HostAllowed {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("netslot host-allowed %s: only IPv4: %w", p, errdefs.ErrInvalid)
		}
	}
	return nil
}

func (c *Config) slots() int { return 1 << (c.SlotPrefixLen - c.CIDR.Bits()) }

// addrs returns the host and guest addresses of slot index i.
func (c *Config) addrs(i int) (host, guest netip.Addr) {
	base := c.CIDR.Addr().As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(i) << (32 - c.SlotPrefixLen)
	if c.SlotPrefixLen == 30 {
		v++
	}
	mk := func(x uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
	}
	return mk(v), mk(v + 1)
}

// hostVethName and guestVethName are unique per use of a slot: the kernel
// destroys a namespace (and the veth inside) asynchronously, so a name is
// never reused right away.
func (c *Config) hostVethName(index int, use uint64) string {
	return c.IfPrefix + "h" + strconv.FormatInt(int64(index), 36) + "." + strconv.FormatUint(use, 36)
}

func (c *Config) guestTempName(index int, use uint64) string {
	return c.IfPrefix + "g" + strconv.FormatInt(int64(index), 36) + "." + strconv.FormatUint(use, 36)
}

// isVethName reports whether name is a host veth or guest temporary name
// of this pool: "<prefix>(h|g)<index>.<use>" in base 36.
func (c *Config) isVethName(name string) bool {
	rest, ok := strings.CutPrefix(name, c.IfPrefix)
	if !ok || rest == "" || (rest[0] != 'h' && rest[0] != 'g') {
		return false
	}
	idx, use, ok := strings.Cut(rest[1:], ".")
	isB36 := func(s string, max int) bool {
		return s != "" && len(s) <= max && strings.Trim(s, "0123456789abcdefghijklmnopqrstuvwxyz") == ""
	}
	return ok && isB36(idx, 3) && isB36(use, 7)
}

// hostVethWildcard matches every host-side veth of the pool.
func (c *Config) hostVethWildcard() string { return c.IfPrefix + "h" }

// useLimit keeps the use counter within 7 base-36 digits.
const useLimit = 36 * 36 * 36 * 36 * 36 * 36 * 36

// netnsName is "sbx-<id>-<use>".
func netnsName(id string, use uint64) string {
	return sandbox.HostName(id) + "-" + strconv.FormatUint(use, 36)
}

// sandboxOfNetNS returns the sandbox ID in a namespace name made by netnsName.
func sandboxOfNetNS(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, sandbox.HostName(""))
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", false
	}
	return rest[:i], true
}

// aliasPrefix marks the veths of the pool: "warren/<table>/<id>/<netns>".
func (c *Config) aliasPrefix() string { return "warren/" + c.Table + "/" }

func (c *Config) alias(id, ns string) string { return c.aliasPrefix() + id + "/" + ns }

// parseAlias returns the table, sandbox ID and namespace of a veth alias.
func parseAlias(alias string) (table, id, ns string, ok bool) {
	rest, ok := strings.CutPrefix(alias, "warren/")
	if !ok {
		return "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// slotChain is the nftables chain holding a slot's egress rules.
func slotChain(id, hostVeth string) string { return "slot-" + id + "-" + hostVeth }

// natChain is the nftables chain holding a slot's redirects.
func natChain(id, hostVeth string) string { return "nat-" + id + "-" + hostVeth }

// parseSlotChain returns the sandbox ID and host veth of a slot chain
// name or of a nat chain name.
func parseSlotChain(name string) (id, hostVeth string, ok bool) {
	rest, ok := strings.CutPrefix(name, "slot-")
	if !ok {
		rest, ok = strings.CutPrefix(name, "nat-")
	}
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

func validPolicy(p Policy) error {
	for _, l := range [][]netip.Prefix{p.AllowOut, p.DenyOut} {
		for _, x := range l {
			if !x.IsValid() || !x.Addr().Is4() {
				return fmt.Errorf("egress prefix %s: only IPv4 prefixes: %w", x, errdefs.ErrInvalid)
			}
		}
	}
	if r := p.Redirect; r != nil && (p.Egress == nil || r.TCP == 0 || r.DNSUDP == 0 || r.DNSTCP == 0) {
		return fmt.Errorf("egress redirect %+v: needs egress rules and three ports: %w", *r, errdefs.ErrInvalid)
	}
	return nil
}

// tail is the part of a namespace name after its last "-".
func tail(ns string) string {
	for j := len(ns) - 1; j >= 0; j-- {
		if ns[j] == '-' {
			return ns[j+1:]
		}
	}
	return ns
}

func parseBase36(s string) uint64 {
	var v uint64
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			v = v*36 + uint64(c-'0')
		case c >= 'a' && c <= 'z':
			v = v*36 + uint64(c-'a'+10)
		}
	}
	return v
}
