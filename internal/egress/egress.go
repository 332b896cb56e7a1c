// Package egress is the one guarded dialer for every outbound connection
// the host makes on a tenant's behalf (image pulls and their registry
// token and redirect hops, webhook deliveries).
//
// A tenant names the destination (an image reference, a webhook URL), so
// the destination is untrusted: by default the dialer refuses loopback,
// private, link-local, CGNAT (100.64.0.0/10, which holds the sandboxes'
// own network), benchmarking (198.18.0.0/15), unspecified, multicast and
// reserved addresses, the IPv6 equivalents (and IPv4 addresses embedded
// in IPv6 forms), and every address of the host's own interfaces. The
// check runs in the net.Dialer's Control hook on the address actually
// being connected to, after DNS resolution, so a name that resolves to a
// public address once and a private one the next time (DNS rebinding)
// cannot get through.
//
// The operator, who is trusted, allows exceptions (internal registries,
// webhook sinks) with Policy entries: a CIDR or bare IP (any port), an
// IP:port, or a host name:port (that name as requested, whatever it
// resolves to): `warren serve --egress-allow`.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// ErrRefused is the error of a connection the policy refused. It is of
// class errdefs.ErrForbidden.
var ErrRefused = fmt.Errorf("address not allowed by the server's egress policy: %w", errdefs.ErrForbidden)

// Policy decides which addresses may be connected to. The zero Policy (and
// a nil *Policy) denies every non-public address. It is safe for
// concurrent use once made.
type Policy struct {
	prefixes  []netip.Prefix
	addrPorts map[netip.AddrPort]bool
	hostPorts map[string]bool // lowercased "name:port"
	// hostAddrs lists the host's own addresses; net.InterfaceAddrs by
	// default (tests replace it).
	hostAddrs func() ([]netip.Addr, error)
}

// Parse makes a Policy from the operator's allow entries: "CIDR", "IP",
// "IP:port" ("[v6]:port") or "host:port".
func Parse(entries []string) (*Policy, error) {
	p := &Policy{addrPorts: map[netip.AddrPort]bool{}, hostPorts: map[string]bool{}}
	for _, e := range entries {
		if err := p.add(strings.TrimSpace(e)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// MustParse is Parse for fixed entries (tests, defaults); it panics on a
// bad entry.
func MustParse(entries ...string) *Policy {
	p, err := Parse(entries)
	if err != nil {
		panic(err)
	}
	return p
}

func (p *Policy) add(e string) error {
	if pfx, err := netip.ParsePrefix(e); err == nil {
		p.prefixes = append(p.prefixes, pfx.Masked())
		return nil
	}
	if a, err := netip.ParseAddr(e); err == nil {
		p.prefixes = append(p.prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		return nil
	}
	if ap, err := netip.ParseAddrPort(e); err == nil {
		p.addrPorts[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
		return nil
	}
	host, port, err := net.SplitHostPort(e)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		return fmt.Errorf("egress allow entry %q: want a CIDR, an IP, IP:port or host:port: %w", e, errdefs.ErrInvalid)
	}
	p.hostPorts[strings.ToLower(host)+":"+port] = true
	return nil
}

// Entries is how many allow entries the policy has (for the start-up
// log).
func (p *Policy) Entries() int {
	if p == nil {
		return 0
	}
	return len(p.prefixes) + len(p.addrPorts) + len(p.hostPorts)
}

// allowedHost reports whether the requested "host:port" is allowed by
// name.
func (p *Policy) allowedHost(hostport string) bool {
	return p != nil && p.hostPorts[strings.ToLower(hostport)]
}

// Check returns nil if the host may connect to ip:port, else an error
// wrapping ErrRefused.
func (p *Policy) Check(ap netip.AddrPort) error {
	ip := ap.Addr().Unmap().WithZone("")
	if p != nil {
		if p.addrPorts[netip.AddrPortFrom(ip, ap.Port())] {
			return nil
		}
		for _, pfx := range p.prefixes {
			if pfx.Contains(ip) {
				return nil
			}
		}
	}
	if !Public(ip) {
		return fmt.Errorf("%s: %w", ap, ErrRefused)
	}
	own := hostAddrs
	if p != nil && p.hostAddrs != nil {
		own = p.hostAddrs
	}
	addrs, err := own()
	if err != nil {
		return fmt.Errorf("%s: the host's own addresses are unknown (%v): %w", ap, err, ErrRefused)
	}
	for _, a := range addrs {
		if a.Unmap() == ip {
			return fmt.Errorf("%s is an address of this host: %w", ap, ErrRefused)
		}
	}
	return nil
}

// blocked are the ranges that are never public.
var blocked = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"::/96", "::1/128", "100::/64", "2001::/32", "2001:db8::/32", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Public reports whether ip is a public unicast address: none of the
// ranges above, and, for IPv6 forms that carry an IPv4 address (mapped,
// NAT64 64:ff9b::/96, 6to4 2002::/16), an IPv4 address that is public.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	if !ip.IsValid() {
		return false
	}
	for _, pfx := range blocked {
		if pfx.Contains(ip) {
			return false
		}
	}
	if ip.Is6() {
		b := ip.As16()
		switch {
		case netip.MustParsePrefix("64:ff9b::/96").Contains(ip), netip.MustParsePrefix("64:ff9b:1::/48").Contains(ip):
			return Public(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case netip.MustParsePrefix("2002::/16").Contains(ip):
			return Public(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
	}
	return true
}

func hostAddrs() ([]netip.Addr, error) {
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ifs))
	for _, a := range ifs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// Dialer connects through the policy. Timeout bounds a connect (default
// 30 s).
type Dialer struct {
	Policy  *Policy
	Timeout time.Duration
}

// DialContext connects to address ("host:port") over a TCP network when
// the policy allows the address connected to (checked per attempt, after
// resolution) or the requested host:port by name.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("egress: network %q: %w", network, ErrRefused)
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	byName := d.Policy.allowedHost(address)
	nd := &net.Dialer{Timeout: timeout, Control: func(_, connected string, _ syscall.RawConn) error {
		if byName {
			return nil
		}
		ap, err := netip.ParseAddrPort(connected)
		if err != nil {
			return fmt.Errorf("egress: address %q: %w", connected, ErrRefused)
		}
		return d.Policy.Check(ap)
	}}
	return nd.DialContext(ctx, network, address)
}

// Transport returns an HTTP transport whose every connection goes through
// d (no proxy from the environment: a proxy would connect on the
// tenant's behalf unchecked).
func (d *Dialer) Transport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = d.DialContext
	tr.DialTLSContext = nil
	return tr
}

// Refused reports whether err is (or wraps) a refusal of the policy.
func Refused(err error) bool { return errors.Is(err, ErrRefused) }

// Describe is a message for a tenant about a failed outbound request: it
// names the kind of failure (refused by policy, host not found, timed out,
// could not connect) and never the peer's answer, so errors cannot be
// used to read or scan what the host can reach.
func Describe(err error) string {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case err == nil:
		return ""
	case Refused(err):
		return "the destination's address is not allowed by this server's egress policy"
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return "the destination's host name does not resolve"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &opErr) && opErr.Timeout():
		return "the connection timed out"
	case errors.Is(err, context.Canceled):
		return "the request was canceled"
	}
	return "could not connect to the destination"
}
