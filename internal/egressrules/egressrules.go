// Package egressrules holds the name-based part of a sandbox's egress
// policy, beside the CIDR lists the firewall applies (netslot.Policy):
// the domains of E2B's network.allowOut ("example.com",
// "*.example.com"), the header transforms of network.rules with the
// secrets filled in, and a SOCKS5 egressProxy. A sandbox whose policy
// has Rules has every outbound TCP connection go through the host's
// egress proxy (internal/egressproxy), which decides by these rules.
//
// Patterns and names are lower-case DNS names without a trailing dot. A
// wildcard "*.example.com" matches every name below example.com, at any
// depth, and not example.com itself; a bare "*" is not a pattern.
//
// The package depends on the standard library only: the control plane
// validates with it, the node decides with it.
package egressrules

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Rules are a sandbox's name-based egress rules. The zero value allows
// no name and transforms nothing.
type Rules struct {
	// Hosts are the domain entries of allowOut: a connection whose TLS
	// SNI or HTTP Host matches one (and resolves to the address dialled)
	// is allowed, whatever the CIDR lists say.
	Hosts []string `json:"hosts,omitempty"`
	// Transforms are network.rules, one per host pattern.
	Transforms []Transform `json:"transforms,omitempty"`
	// Proxy, when set, carries every allowed TCP connection.
	Proxy *Proxy `json:"proxy,omitempty"`
}

// Transform is what is done to the HTTPS requests to hosts matching
// Host: Headers are set (replacing a header of the same name), with the
// secrets placeholders already filled in.
type Transform struct {
	Host    string            `json:"host"`
	Headers map[string]string `json:"headers,omitempty"`
}

// Proxy is a SOCKS5 proxy (RFC 1928, with RFC 1929 credentials when
// Username is set).
type Proxy struct {
	Address  string `json:"address"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// Redacted is what may be shown of a value the rules hold but that a
// view must not carry (header values, the proxy's password).
const Redacted = "[redacted]"

// Clone returns a deep copy of r (nil for nil).
func (r *Rules) Clone() *Rules {
	if r == nil {
		return nil
	}
	out := &Rules{Hosts: slices.Clone(r.Hosts)}
	for _, t := range r.Transforms {
		out.Transforms = append(out.Transforms, Transform{Host: t.Host, Headers: maps.Clone(t.Headers)})
	}
	if r.Proxy != nil {
		p := *r.Proxy
		out.Proxy = &p
	}
	return out
}

// Equal reports whether r and o are the same rules.
func (r *Rules) Equal(o *Rules) bool {
	if r == nil || o == nil {
		return r == o
	}
	if !slices.Equal(r.Hosts, o.Hosts) || len(r.Transforms) != len(o.Transforms) {
		return false
	}
	for i, t := range r.Transforms {
		if t.Host != o.Transforms[i].Host || !maps.Equal(t.Headers, o.Transforms[i].Headers) {
			return false
		}
	}
	if (r.Proxy == nil) != (o.Proxy == nil) {
		return false
	}
	return r.Proxy == nil || *r.Proxy == *o.Proxy
}

// Redact returns a copy of r for a view: header values and the proxy's
// password replaced by Redacted (nil for nil).
func (r *Rules) Redact() *Rules {
	out := r.Clone()
	if out == nil {
		return nil
	}
	for _, t := range out.Transforms {
		for k := range t.Headers {
			t.Headers[k] = Redacted
		}
	}
	if out.Proxy != nil && out.Proxy.Password != "" {
		out.Proxy.Password = Redacted
	}
	return out
}

// AllowsName reports whether name matches one of the Hosts.
func (r *Rules) AllowsName(name string) bool {
	if r == nil || name == "" {
		return false
	}
	for _, h := range r.Hosts {
		if Match(h, name) {
			return true
		}
	}
	return false
}

// TransformFor returns the transform of name: the one of the exact
// pattern, else of the longest matching wildcard (E2B's precedence; the
// rule sets are not merged).
func (r *Rules) TransformFor(name string) (Transform, bool) {
	if r == nil || name == "" {
		return Transform{}, false
	}
	best := -1
	for i, t := range r.Transforms {
		switch {
		case t.Host == name:
			return t, true
		case Match(t.Host, name) && (best < 0 || len(t.Host) > len(r.Transforms[best].Host)):
			best = i
		}
	}
	if best < 0 {
		return Transform{}, false
	}
	return r.Transforms[best], true
}

// Match reports whether name matches pattern: the same name, or for
// "*.suffix" a name ending in ".suffix".
func Match(pattern, name string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+suffix)
	}
	return pattern == name
}

// IsDomain reports whether an allowOut entry is a domain (pattern) rather
// than a CIDR or an IP address.
func IsDomain(entry string) bool {
	if _, err := netip.ParsePrefix(entry); err == nil {
		return false
	}
	if _, err := netip.ParseAddr(entry); err == nil {
		return false
	}
	return true
}

// ParsePattern checks a domain pattern ("example.com", "*.example.com")
// and returns it lower-cased, without a trailing dot. Its error is of
// class invalid, with a message fit for the client that sent s.
func ParsePattern(s string) (string, error) {
	p := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
	name, wild := strings.CutPrefix(p, "*.")
	if p == "*" || strings.Contains(name, "*") {
		return "", errdefs.Publicf(errdefs.ErrInvalid, "%q: a wildcard is only a leading \"*.\" before a domain (e.g. \"*.example.com\")", s)
	}
	if _, ok := CanonicalName(name); !ok {
		return "", errdefs.Publicf(errdefs.ErrInvalid, "%q is not a CIDR, an IP address or a domain name", s)
	}
	if wild {
		return "*." + name, nil
	}
	return name, nil
}

// CanonicalName returns a host name from a TLS SNI, an HTTP Host (without
// its port) or a DNS question lower-cased, without a trailing dot, and
// whether it is a valid name: labels of 1-63 letters, digits, '-' or '_'
// (not starting or ending with '-'), 253 characters at most, and not an
// IP address.
func CanonicalName(s string) (string, bool) {
	n := strings.TrimSuffix(strings.ToLower(s), ".")
	if n == "" || len(n) > 253 {
		return "", false
	}
	if _, err := netip.ParseAddr(n); err == nil {
		return "", false
	}
	for _, l := range strings.Split(n, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	return n, true
}
