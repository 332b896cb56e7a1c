package egressproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/warren-sandbox/warren/internal/egressrules"
)

// The proxy's resolver for a sandbox behind it. A question is answered
// only for a name the rules allow (allowOut's domains), or for any name
// when the sandbox may reach public addresses without one anyway
// (openByDefault): a question for another name never leaves the host,
// so a closed sandbox cannot send data out in its questions. Answers are
// the name's IPv4 addresses the sandbox may connect to (never a
// private, loopback or host address), and are pinned for the connections
// that follow (pin.go). AAAA and other types get an empty answer (the
// sandbox has no IPv6); a name that is not allowed gets NXDOMAIN.

// maxAnswers bounds the A records of one answer.
const maxAnswers = 16

// dnsInflight bounds the questions of one sandbox being resolved at once.
const dnsInflight = 64

func (g *guest) serveDNSUDP(pc *net.UDPConn) {
	sem := make(chan struct{}, dnsInflight)
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if from.Addr().Unmap() != g.addr {
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		select {
		case sem <- struct{}{}:
		default:
			continue // too many at once: dropped, the stub resolver retries
		}
		go func() {
			defer func() { <-sem }()
			if a := g.answerDNS(q); a != nil {
				_, _ = pc.WriteToUDPAddrPort(a, from)
			}
		}()
	}
}

func (g *guest) serveDNSTCP(ln *net.TCPListener) {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !g.fromGuest(c.RemoteAddr()) {
			c.Close()
			continue
		}
		go func() {
			defer c.Close()
			for {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				a := g.answerDNS(q)
				if a == nil {
					return
				}
				if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(a)))); err != nil {
					return
				}
				if _, err := c.Write(a); err != nil {
					return
				}
			}
		}()
	}
}

// answerDNS answers one DNS message; nil drops it (not a question).
func (g *guest) answerDNS(msg []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return nil
	}
	resp := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if h.OpCode != 0 || len(qs) != 1 {
		resp.RCode = dnsmessage.RCodeNotImplemented
		return build(resp, qs, nil)
	}
	q := qs[0]
	name, ok := egressrules.CanonicalName(q.Name.String())
	if !ok || q.Class != dnsmessage.ClassINET {
		resp.RCode = dnsmessage.RCodeNameError
		g.record(Entry{Proto: "dns", Host: q.Name.String(), Reason: ReasonDNSDenied})
		return build(resp, qs, nil)
	}
	pol := g.policy()
	byName := pol.Egress.AllowsName(name)
	if !byName && !openByDefault(pol) {
		resp.RCode = dnsmessage.RCodeNameError
		g.record(Entry{Proto: "dns", Host: name, Reason: ReasonDNSDenied})
		return build(resp, qs, nil)
	}
	if q.Type != dnsmessage.TypeA {
		// No IPv6 in a sandbox, and no other types: an empty answer.
		return build(resp, qs, nil)
	}
	ctx, cancel := context.WithTimeout(g.ctx, 5*time.Second)
	defer cancel()
	addrs, err := g.p.cfg.Resolver.LookupNetIP(ctx, "ip4", name)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			resp.RCode = dnsmessage.RCodeNameError
		} else {
			resp.RCode = dnsmessage.RCodeServerFailure
		}
		g.record(Entry{Proto: "dns", Host: name, Allowed: true, Reason: ReasonDNSName})
		return build(resp, qs, nil)
	}
	var keep []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if !a.Is4() {
			continue
		}
		dst := netip.AddrPortFrom(a, 0)
		if byName {
			if g.p.cfg.Upstream.Check(dst) != nil {
				continue
			}
		} else if !verdict(pol, g.p.cfg.Upstream, dst, "", nil).allow {
			continue
		}
		keep = append(keep, a)
		if len(keep) == maxAnswers {
			break
		}
	}
	g.pinAddrs(name, keep)
	g.record(Entry{Proto: "dns", Host: name, Allowed: true, Reason: ReasonDNSName})
	return build(resp, qs, keep)
}

func build(h dnsmessage.Header, qs []dnsmessage.Question, addrs []netip.Addr) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	for _, q := range qs {
		if err := b.Question(q); err != nil {
			return nil
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil
	}
	for _, a := range addrs {
		if err := b.AResource(dnsmessage.ResourceHeader{Name: qs[0].Name, Class: dnsmessage.ClassINET, TTL: answerTTL},
			dnsmessage.AResource{A: a.As4()}); err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
