package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/secrets"
)

// egressSpec is the egress part of a create's network or of a network
// update, as sent.
type egressSpec struct {
	AllowOut    []string
	DenyOut     []string
	Rules       map[string]json.RawMessage
	EgressProxy json.RawMessage
}

// netRule is one entry of network.rules[host].
type netRule struct {
	Transform *struct {
		Headers map[string]string `json:"headers"`
	} `json:"transform"`
}

// proxySpec is network.egressProxy.
type proxySpec struct {
	Address  string  `json:"address"`
	Username *string `json:"username"`
	Password *string `json:"password"`
}

// egressPolicy turns e into the node's policy: CIDRs and IPs of allowOut
// and denyOut into the lists, allowOut's domains, the rules' header
// transforms (the team's secrets filled in, here and nowhere else on the
// control plane) and the SOCKS5 proxy into egress rules, which put the
// sandbox behind the node's egress proxy. It also returns the document
// kept for display: rules' keys lower-cased, and the proxy without its
// password. field prefixes the error paths ("network" for a create).
func (s *Server) egressPolicy(ctx context.Context, teamID, field string, e egressSpec) (sandbox.NetworkPolicy, egressDoc, error) {
	var p sandbox.NetworkPolicy
	var doc egressDoc
	path := func(f string) string {
		if field == "" {
			return f
		}
		return field + "." + f
	}
	var rules egressrules.Rules
	named := false
	for i, v := range e.AllowOut {
		if pfx, ok := cidrOf(v); ok {
			p.AllowOut = append(p.AllowOut, pfx)
			continue
		}
		h, err := egressrules.ParsePattern(v)
		if err != nil {
			return p, doc, errdefs.Wrapf(err, "invalid value for field '%s[%d]'", path("allowOut"), i)
		}
		if !slices.Contains(rules.Hosts, h) {
			rules.Hosts = append(rules.Hosts, h)
		}
		named = true
	}
	for i, v := range e.DenyOut {
		pfx, ok := cidrOf(v)
		if !ok {
			return p, doc, invalid(fmt.Sprintf("%s[%d]", path("denyOut"), i), "%q is not a CIDR or IP address (domain names are not supported for deny rules: list the domains allowed in allowOut)", v)
		}
		p.DenyOut = append(p.DenyOut, pfx)
	}
	if len(e.Rules) > 0 {
		ts, docRules, err := s.transforms(ctx, teamID, path("rules"), e.Rules)
		if err != nil {
			return p, doc, err
		}
		rules.Transforms, doc.Rules = ts, docRules
		named = true
	}
	if given(e.EgressProxy) {
		px, shown, err := parseProxy(path("egressProxy"), e.EgressProxy)
		if err != nil {
			return p, doc, err
		}
		rules.Proxy, doc.EgressProxy = px, shown
		named = true
	}
	if named {
		p.Egress = &rules
	}
	return p, doc, nil
}

// egressDoc is what egressPolicy changed of the display document.
type egressDoc struct {
	Rules       map[string]json.RawMessage
	EgressProxy json.RawMessage
}

func cidrOf(v string) (netip.Prefix, bool) {
	if pfx, err := netip.ParsePrefix(v); err == nil {
		return pfx.Masked(), true
	}
	if a, err := netip.ParseAddr(v); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}

// transforms parses network.rules: per host pattern (exact or "*."
// wildcard, lower-cased), its rules' headers in order (a later rule's
// header wins), with every ${e2b.secrets.NAME} filled in from the team's
// secrets. A secret that does not exist is a 400 naming it.
func (s *Server) transforms(ctx context.Context, teamID, field string, in map[string]json.RawMessage) ([]egressrules.Transform, map[string]json.RawMessage, error) {
	hosts := make([]string, 0, len(in))
	for h := range in {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	type parsed struct {
		host    string
		headers map[string]string
	}
	var all []parsed
	var names []string
	doc := map[string]json.RawMessage{}
	for _, key := range hosts {
		host, err := egressrules.ParsePattern(key)
		if err != nil {
			return nil, nil, errdefs.Wrapf(err, "invalid value for field '%s' (a host key)", field)
		}
		var rs []netRule
		if err := json.Unmarshal(in[key], &rs); err != nil {
			return nil, nil, invalid(field+"."+key, "must be a list of rules ({transform: {headers}})")
		}
		headers := map[string]string{}
		for i, r := range rs {
			if r.Transform == nil {
				continue
			}
			for k, v := range r.Transform.Headers {
				if !validHeaderName(k) {
					return nil, nil, invalid(fmt.Sprintf("%s.%s[%d].transform.headers", field, key, i), "%q is not an HTTP header name", k)
				}
				if strings.ContainsAny(v, "\r\n\x00") {
					return nil, nil, invalid(fmt.Sprintf("%s.%s[%d].transform.headers.%s", field, key, i, k), "must not contain line breaks")
				}
				headers[k] = v
				names = append(names, secrets.Placeholders(v)...)
			}
		}
		if _, dup := doc[host]; dup {
			return nil, nil, invalid(field, "host %q is given twice", host)
		}
		doc[host] = in[key]
		all = append(all, parsed{host, headers})
	}
	values, err := s.cfg.Secrets.Resolve(ctx, teamID, names)
	if err != nil {
		return nil, nil, err
	}
	out := make([]egressrules.Transform, 0, len(all))
	for _, p := range all {
		t := egressrules.Transform{Host: p.host, Headers: map[string]string{}}
		for k, v := range p.headers {
			t.Headers[k] = secrets.Fill(v, values)
		}
		out = append(out, t)
	}
	return out, doc, nil
}

// validHeaderName reports whether k is an HTTP field name (a token).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

// parseProxy checks network.egressProxy: host:port, and RFC 1929's 255
// bytes for username and password (a password only with a username). It
// returns the proxy and what is shown of it (no password).
func parseProxy(field string, raw json.RawMessage) (*egressrules.Proxy, json.RawMessage, error) {
	var ps proxySpec
	if err := json.Unmarshal(raw, &ps); err != nil {
		return nil, nil, invalid(field, "must be {address, username?, password?}")
	}
	host, port, err := net.SplitHostPort(ps.Address)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		return nil, nil, invalid(field+".address", "must be host:port, got %q", ps.Address)
	}
	px := &egressrules.Proxy{Address: ps.Address}
	if ps.Username != nil {
		px.Username = *ps.Username
	}
	if ps.Password != nil {
		px.Password = *ps.Password
	}
	switch {
	case len(px.Username) > 255:
		return nil, nil, invalid(field+".username", "longer than 255 bytes")
	case len(px.Password) > 255:
		return nil, nil, invalid(field+".password", "longer than 255 bytes")
	case px.Password != "" && px.Username == "":
		return nil, nil, invalid(field+".password", "is only valid together with a username")
	}
	shown := map[string]string{"address": px.Address}
	if px.Username != "" {
		shown["username"] = px.Username
	}
	b, _ := json.Marshal(shown)
	return px, b, nil
}
