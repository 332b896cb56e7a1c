package egressproxytest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// guestEnv carries a GuestOp to the test binary re-executed in a
// sandbox's namespace.
const guestEnv = "WARREN_EGRESSPROXYTEST_GUEST"

// GuestOp is a request made from inside a sandbox's network namespace.
type GuestOp struct {
	// Op is "http" (a request to URL), "dns" (an A question for Name to
	// 8.8.8.8:53, which the slot redirects) or "banner" (connect to Dial
	// and read what the server says first).
	Op   string `json:"op"`
	URL  string `json:"url,omitempty"`
	Name string `json:"name,omitempty"`
	// Dial, when set, is the address connected to ("ip:port"), whatever
	// the URL's host resolves to; else the host is resolved with DNS
	// (8.8.8.8:53 from the namespace).
	Dial string `json:"dial,omitempty"`
	// SNI overrides the TLS server name (default: the URL's host).
	SNI string `json:"sni,omitempty"`
	// Host overrides the Host header.
	Host   string            `json:"host,omitempty"`
	Header map[string]string `json:"header,omitempty"`
	// RootsPEM are the roots the guest trusts for HTTPS.
	RootsPEM [][]byte `json:"roots,omitempty"`
	// Stream reads the body for this long, then closes.
	StreamFor time.Duration `json:"streamFor,omitempty"`
	TCP       bool          `json:"tcp,omitempty"` // DNS over TCP
}

// GuestResult is what the guest saw.
type GuestResult struct {
	Status int          `json:"status"`
	Body   string       `json:"body"`
	Err    string       `json:"err"`
	Addrs  []netip.Addr `json:"addrs"`
	RCode  string       `json:"rcode"`
	// Elapsed is how long the request took.
	Elapsed time.Duration `json:"elapsed"`
}

// GuestMain runs a GuestOp when the process is a guest re-executed by
// RunGuest; call it first in TestMain.
func GuestMain() {
	raw := os.Getenv(guestEnv)
	if raw == "" {
		return
	}
	var op GuestOp
	var res GuestResult
	start := time.Now()
	if err := json.Unmarshal([]byte(raw), &op); err != nil {
		res.Err = err.Error()
	} else {
		res = runOp(op)
	}
	res.Elapsed = time.Since(start)
	json.NewEncoder(os.Stdout).Encode(res)
	os.Exit(0)
}

// RunGuest runs op in the namespace at nsPath.
func RunGuest(t testing.TB, nsPath string, op GuestOp) GuestResult {
	t.Helper()
	res, err := StartGuest(nsPath, op)()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// StartGuest starts op in the namespace at nsPath; the function it
// returns waits for its result.
func StartGuest(nsPath string, op GuestOp) func() (GuestResult, error) {
	b, _ := json.Marshal(op)
	cmd := exec.Command("nsenter", "--net="+nsPath, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), guestEnv+"="+string(b))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return func() (GuestResult, error) { return GuestResult{}, err }
	}
	return func() (GuestResult, error) {
		var res GuestResult
		if err := cmd.Wait(); err != nil {
			return res, fmt.Errorf("guest %+v: %v\n%s", op, err, errb.String())
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			return res, fmt.Errorf("guest %+v: %v: %s", op, err, out.String())
		}
		return res, nil
	}
}

func dnsResolver(tcp bool) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if tcp {
			network = "tcp"
		}
		var d net.Dialer
		return d.DialContext(ctx, network, "8.8.8.8:53")
	}}
}

func runOp(op GuestOp) GuestResult {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res GuestResult
	switch op.Op {
	case "dns":
		addrs, err := dnsResolver(op.TCP).LookupNetIP(ctx, "ip4", op.Name)
		if err != nil {
			res.Err = err.Error()
			if de, ok := err.(*net.DNSError); ok && de.IsNotFound {
				res.RCode = "NXDOMAIN"
			}
		}
		res.Addrs = addrs
		return res
	case "banner":
		// Connect to Dial and read the first line the server sends.
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp4", op.Dial)
		if err != nil {
			res.Err = err.Error()
			return res
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 256)
		n, err := c.Read(buf)
		res.Body = strings.TrimSpace(string(buf[:n]))
		if err != nil {
			res.Err = err.Error()
		}
		return res
	case "http":
	default:
		res.Err = "unknown op " + op.Op
		return res
	}
	roots := x509.NewCertPool()
	for _, p := range op.RootsPEM {
		roots.AppendCertsFromPEM(p)
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: op.SNI},
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			if op.Dial != "" {
				return d.DialContext(ctx, "tcp4", op.Dial)
			}
			host, port, _ := net.SplitHostPort(addr)
			addrs, err := dnsResolver(false).LookupNetIP(ctx, "ip4", host)
			if err != nil {
				return nil, err
			}
			return d.DialContext(ctx, "tcp4", net.JoinHostPort(addrs[0].String(), port))
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, op.URL, nil)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	for k, v := range op.Header {
		req.Header.Set(k, v)
	}
	if op.Host != "" {
		req.Host = op.Host
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	var body []byte
	if op.StreamFor > 0 {
		deadline := time.Now().Add(op.StreamFor)
		buf := make([]byte, 4096)
		for time.Now().Before(deadline) {
			n, err := resp.Body.Read(buf)
			body = append(body, buf[:n]...)
			if err != nil {
				if err != io.EOF {
					res.Err = "stream: " + err.Error()
				}
				break
			}
		}
	} else {
		body, err = io.ReadAll(resp.Body)
		if err != nil {
			res.Err = err.Error()
		}
	}
	res.Body = strings.TrimSpace(string(body))
	return res
}

// String is a result for failure messages.
func (r GuestResult) String() string {
	return fmt.Sprintf("status=%d body=%q err=%q addrs=%v rcode=%s", r.Status, r.Body, r.Err, r.Addrs, r.RCode)
}
