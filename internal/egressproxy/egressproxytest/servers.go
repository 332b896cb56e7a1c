package egressproxytest

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Request is what an upstream server received.
type Request struct {
	TLS    bool
	SNI    string
	Host   string
	Method string
	Path   string
	Header http.Header
}

// Upstream is an HTTPS (port 443) and HTTP (port 80) server at one
// address of the world, with a certificate for its names. It answers
// every request with 200 and "hello from <names[0]>", and never echoes
// what it received (the tests read that from Requests).
type Upstream struct {
	Addr  netip.Addr
	Names []string

	mu   sync.Mutex
	reqs []Request
}

// HTTPS starts an upstream at a new address of the world.
func (w *World) HTTPS(t testing.TB, names ...string) *Upstream {
	t.Helper()
	u := &Upstream{Addr: w.Addr(), Names: names}
	cert := w.CA.Leaf(t, names...)
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		req := Request{TLS: r.TLS != nil, Host: r.Host, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}
		if r.TLS != nil {
			req.SNI = r.TLS.ServerName
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, req)
		u.mu.Unlock()
		if r.URL.Path == "/stream" {
			// A response that lasts: one line a second until the client goes.
			fl := rw.(http.Flusher)
			for i := 0; ; i++ {
				if _, err := fmt.Fprintf(rw, "tick %d\n", i); err != nil {
					return
				}
				fl.Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		fmt.Fprintf(rw, "hello from %s", names[0])
	})
	for _, port := range []int{443, 80} {
		l, err := w.Listen("tcp4", net.JoinHostPort(u.Addr.String(), strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		ln := l.(net.Listener)
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		if port == 443 {
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	return u
}

// Requests returns what the upstream received so far.
func (u *Upstream) Requests() []Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Request(nil), u.reqs...)
}

// Socks is a SOCKS5 server in the world.
type Socks struct {
	Addr     netip.AddrPort
	User     string
	Password string
	// Resolve maps the names CONNECT may carry (remote DNS) to addresses.
	Resolve map[string]netip.Addr

	mu      sync.Mutex
	targets []string
	ln      net.Listener
}

// SOCKS5 starts a SOCKS5 server (with user/password authentication when
// user is set) at a new address of the world, port 1080.
func (w *World) SOCKS5(t testing.TB, user, password string, resolve map[string]netip.Addr) *Socks {
	t.Helper()
	a := w.Addr()
	l, err := w.Listen("tcp4", net.JoinHostPort(a.String(), "1080"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Socks{Addr: netip.AddrPortFrom(a, 1080), User: user, Password: password, Resolve: resolve, ln: l.(net.Listener)}
	t.Cleanup(func() { s.ln.Close() })
	go func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

// Stop closes the server's listener (the proxy is then down).
func (s *Socks) Stop() { s.ln.Close() }

// Targets returns the CONNECT targets the server was asked for.
func (s *Socks) Targets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.targets...)
}

func (s *Socks) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var h [2]byte
	if _, err := io.ReadFull(c, h[:]); err != nil || h[0] != 5 {
		return
	}
	methods := make([]byte, h[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return
	}
	want := byte(0)
	if s.User != "" {
		want = 2
	}
	found := false
	for _, m := range methods {
		found = found || m == want
	}
	if !found {
		c.Write([]byte{5, 0xff})
		return
	}
	c.Write([]byte{5, want})
	if want == 2 {
		var v [2]byte
		if _, err := io.ReadFull(c, v[:]); err != nil {
			return
		}
		user := make([]byte, v[1])
		io.ReadFull(c, user)
		var pl [1]byte
		io.ReadFull(c, pl[:])
		pass := make([]byte, pl[0])
		io.ReadFull(c, pass)
		if string(user) != s.User || string(pass) != s.Password {
			c.Write([]byte{1, 1})
			return
		}
		c.Write([]byte{1, 0})
	}
	var req [4]byte
	if _, err := io.ReadFull(c, req[:]); err != nil || req[1] != 1 {
		return
	}
	var host string
	switch req[3] {
	case 1:
		var b [4]byte
		io.ReadFull(c, b[:])
		host = netip.AddrFrom4(b).String()
	case 3:
		var l [1]byte
		io.ReadFull(c, l[:])
		b := make([]byte, l[0])
		io.ReadFull(c, b)
		host = string(b)
	default:
		return
	}
	var pb [2]byte
	io.ReadFull(c, pb[:])
	port := binary.BigEndian.Uint16(pb[:])
	s.mu.Lock()
	s.targets = append(s.targets, net.JoinHostPort(host, strconv.Itoa(int(port))))
	s.mu.Unlock()
	dial := host
	if a, ok := s.Resolve[host]; ok {
		dial = a.String()
	}
	up, err := net.DialTimeout("tcp4", net.JoinHostPort(dial, strconv.Itoa(int(port))), 5*time.Second)
	if err != nil {
		c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	defer up.Close()
	c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	_ = c.SetDeadline(time.Time{})
	go io.Copy(up, c)
	io.Copy(c, up)
}

// Resolver answers from a map (the Resolver of an in-process Proxy).
type Resolver struct {
	mu    sync.Mutex
	Names map[string][]netip.Addr
	asked []string
}

// NewResolver returns a Resolver over names.
func NewResolver(names map[string][]netip.Addr) *Resolver { return &Resolver{Names: names} }

// LookupNetIP implements egressproxy.Resolver.
func (r *Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	a, ok := r.Names[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return append([]netip.Addr(nil), a...), nil
}

// Set replaces a name's addresses.
func (r *Resolver) Set(name string, addrs ...netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Names[name] = addrs
}

// Asked returns the names looked up so far.
func (r *Resolver) Asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asked...)
}

// DNSServer serves r over UDP and TCP on a loopback port and returns its
// address (for `warren serve --egress-dns`).
func DNSServer(t testing.TB, r *Resolver) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	answer := func(q []byte) []byte {
		var p dnsmessage.Parser
		h, err := p.Start(q)
		if err != nil {
			return nil
		}
		qs, err := p.AllQuestions()
		if err != nil || len(qs) != 1 {
			return nil
		}
		name := qs[0].Name.String()
		name = name[:len(name)-1]
		rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
		addrs, err := r.LookupNetIP(context.Background(), "ip4", name)
		if err != nil {
			rh.RCode = dnsmessage.RCodeNameError
		}
		b := dnsmessage.NewBuilder(nil, rh)
		_ = b.StartQuestions()
		_ = b.Question(qs[0])
		_ = b.StartAnswers()
		if qs[0].Type == dnsmessage.TypeA {
			for _, a := range addrs {
				_ = b.AResource(dnsmessage.ResourceHeader{Name: qs[0].Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: a.As4()})
			}
		}
		out, _ := b.Finish()
		return out
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if a := answer(buf[:n]); a != nil {
				pc.WriteTo(a, from)
			}
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					var l [2]byte
					if _, err := io.ReadFull(c, l[:]); err != nil {
						return
					}
					q := make([]byte, binary.BigEndian.Uint16(l[:]))
					if _, err := io.ReadFull(c, q); err != nil {
						return
					}
					a := answer(q)
					if a == nil {
						return
					}
					c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(a))))
					c.Write(a)
				}
			}()
		}
	}()
	return addr
}

// Banner starts a server at a new address of the world, port 2525, that
// speaks first (as SMTP or SSH do): "220 <text>".
func (w *World) Banner(t testing.TB, text string) netip.AddrPort {
	t.Helper()
	a := w.Addr()
	l, err := w.Listen("tcp4", net.JoinHostPort(a.String(), "2525"))
	if err != nil {
		t.Fatal(err)
	}
	ln := l.(net.Listener)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "220 %s\r\n", text)
			time.Sleep(100 * time.Millisecond)
			c.Close()
		}
	}()
	return netip.AddrPortFrom(a, 2525)
}
