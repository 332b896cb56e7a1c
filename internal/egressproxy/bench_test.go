package egressproxy_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/netslot"
)

// dialer dials from inside a slot's namespace: one goroutine locked on a
// thread in it makes every socket (a socket stays in the namespace it was
// made in), so a dial costs a channel hop, not a thread.
type dialer struct {
	req chan string
	res chan dialResult
}

type dialResult struct {
	c   net.Conn
	err error
}

func newDialer(b *testing.B, path string) *dialer {
	d := &dialer{req: make(chan string), res: make(chan dialResult)}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine: never unlocked
		h, err := netns.GetFromPath(path)
		if err == nil {
			err = netns.Set(h)
			h.Close()
		}
		ready <- err
		if err != nil {
			return
		}
		for addr := range d.req {
			c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
			d.res <- dialResult{c, err}
		}
	}()
	if err := <-ready; err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { close(d.req) })
	return d
}

func (d *dialer) dial(addr string) (net.Conn, error) {
	d.req <- addr
	r := <-d.res
	return r.c, r.err
}

// get sends one GET on br/c and reads the whole answer.
func get(c net.Conn, br *bufio.Reader, host, connHdr string) error {
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: %s\r\n\r\n", host, connHdr); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// report prints and reports the percentiles of both series and the
// difference of their medians (what the proxy adds).
func report(b *testing.B, direct, proxied []time.Duration) {
	b.Helper()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(pct(direct, 0.5)), "direct-p50-µs")
	b.ReportMetric(us(pct(proxied, 0.5)), "proxied-p50-µs")
	b.ReportMetric(us(pct(proxied, 0.5)-pct(direct, 0.5)), "added-p50-µs")
	b.ReportMetric(us(pct(proxied, 0.9)-pct(direct, 0.9)), "added-p90-µs")
	b.Logf("%s n=%d: direct p50 %v p90 %v p99 %v | proxied p50 %v p90 %v p99 %v | added p50 %v",
		b.Name(), len(direct), pct(direct, 0.5), pct(direct, 0.9), pct(direct, 0.99),
		pct(proxied, 0.5), pct(proxied, 0.9), pct(proxied, 0.99), pct(proxied, 0.5)-pct(direct, 0.5))
}

// BenchmarkEgressProxyLatency measures the latency the egress proxy adds
// to a sandbox's requests, against the same server reached directly (a
// slot without egress rules, forwarded by the firewall), interleaved:
//   - new-conn: a TCP connection per request (HTTP, Connection: close):
//     the redirect, the read of the Host, the decision by name, the dial;
//   - keep-alive: requests on one open connection (the splice alone);
//   - transform-keep-alive: HTTPS requests on one connection to a host
//     with a header transform (TLS terminated and re-made by the proxy)
//     beside HTTPS straight to the server.
//
// Run it as root: go test -run '^$' -bench EgressProxyLatency -benchtime 2000x ./internal/egressproxy/
func BenchmarkEgressProxyLatency(b *testing.B) {
	e := newEnv(b)
	api := e.upstream("api.test.example")
	direct := e.slot(netslot.Policy{Internet: true})
	proxied := e.slot(netslot.Policy{Egress: &egressrules.Rules{Hosts: []string{"api.test.example"},
		Transforms: []egressrules.Transform{{Host: "api.test.example", Headers: map[string]string{"Authorization": "Bearer bench"}}}}})
	dd, pd := newDialer(b, direct.NetNSPath), newDialer(b, proxied.NetNSPath)
	plain := netip.AddrPortFrom(api.Addr, 80).String()
	secure := netip.AddrPortFrom(api.Addr, 443).String()

	b.Run("new-conn", func(b *testing.B) {
		var ds, ps []time.Duration
		one := func(d *dialer) (time.Duration, error) {
			start := time.Now()
			c, err := d.dial(plain)
			if err != nil {
				return 0, err
			}
			defer c.Close()
			err = get(c, bufio.NewReader(c), "api.test.example", "close")
			return time.Since(start), err
		}
		for range b.N {
			x, err := one(dd)
			if err != nil {
				b.Fatal("direct: ", err)
			}
			y, err := one(pd)
			if err != nil {
				b.Fatal("proxied: ", err)
			}
			ds, ps = append(ds, x), append(ps, y)
		}
		report(b, ds, ps)
	})

	keepAlive := func(b *testing.B, open func(*dialer) (net.Conn, error)) {
		dc, err := open(dd)
		if err != nil {
			b.Fatal(err)
		}
		defer dc.Close()
		pc, err := open(pd)
		if err != nil {
			b.Fatal(err)
		}
		defer pc.Close()
		dbr, pbr := bufio.NewReader(dc), bufio.NewReader(pc)
		var ds, ps []time.Duration
		for range b.N {
			start := time.Now()
			if err := get(dc, dbr, "api.test.example", "keep-alive"); err != nil {
				b.Fatal("direct: ", err)
			}
			mid := time.Now()
			if err := get(pc, pbr, "api.test.example", "keep-alive"); err != nil {
				b.Fatal("proxied: ", err)
			}
			ds, ps = append(ds, mid.Sub(start)), append(ps, time.Since(mid))
		}
		report(b, ds, ps)
	}
	b.Run("keep-alive", func(b *testing.B) {
		keepAlive(b, func(d *dialer) (net.Conn, error) { return d.dial(plain) })
	})
	b.Run("transform-keep-alive", func(b *testing.B) {
		ca, err := e.pool.CACert(proxied.SandboxID)
		if err != nil {
			b.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(ca)
		roots.AppendCertsFromPEM(e.world.CA.PEM)
		keepAlive(b, func(d *dialer) (net.Conn, error) {
			c, err := d.dial(secure)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, &tls.Config{ServerName: "api.test.example", RootCAs: roots, NextProtos: []string{"http/1.1"}})
			return tc, tc.Handshake()
		})
	})
}
