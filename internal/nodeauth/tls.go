package nodeauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// ServerTLS returns the TLS configuration of a node's listeners, serving
// the certificate and key in certFile and keyFile. The files are read
// again when they change (at most once a second, at a handshake), so a
// renewed certificate (cert-manager, a rotation by hand) is served without
// a restart.
func ServerTLS(certFile, keyFile string) (*tls.Config, error) {
	r := &reloader{cert: certFile, key: keyFile}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.get() },
		NextProtos:     []string{"h2", "http/1.1"},
	}, nil
}

type reloader struct {
	cert, key string

	mu      sync.Mutex
	current *tls.Certificate
	stamp   [2]time.Time // the files' modification times when loaded
	checked time.Time
}

func (r *reloader) stamps() ([2]time.Time, error) {
	var out [2]time.Time
	for i, f := range []string{r.cert, r.key} {
		fi, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = fi.ModTime()
	}
	return out, nil
}

func (r *reloader) load() (*tls.Certificate, error) {
	st, err := r.stamps()
	if err != nil {
		return nil, fmt.Errorf("tls certificate: %w: %w", errdefs.ErrInvalid, err)
	}
	c, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		return nil, fmt.Errorf("tls certificate %s: %w: %w", r.cert, errdefs.ErrInvalid, err)
	}
	r.mu.Lock()
	r.current, r.stamp, r.checked = &c, st, time.Now()
	r.mu.Unlock()
	return &c, nil
}

func (r *reloader) get() (*tls.Certificate, error) {
	r.mu.Lock()
	cur, stamp, fresh := r.current, r.stamp, time.Since(r.checked) < time.Second
	if !fresh {
		r.checked = time.Now()
	}
	r.mu.Unlock()
	if fresh {
		return cur, nil
	}
	if st, err := r.stamps(); err == nil && st != stamp {
		if c, err := r.load(); err == nil {
			return c, nil
		}
		// A half-written renewal: keep serving the old one.
	}
	return cur, nil
}

// ClientTLS returns the TLS configuration that verifies the peers of the
// hops between control plane and nodes against the CA certificates in
// caFile (PEM), or the system's roots when caFile is empty.
func ClientTLS(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("ca file: %w: %w", errdefs.ErrInvalid, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca file %s: no PEM certificate in it: %w", caFile, errdefs.ErrInvalid)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// ErrRedirect is what a hop between control plane and nodes returns for
// a peer that answered with a redirect: a node answers for itself, and a
// redirect would take the hop's credential elsewhere.
var ErrRedirect = errors.New("the peer answered with a redirect, which is not followed")

// Transport is the transport of the hops between control plane and
// nodes: no proxy from the environment (HTTP_PROXY would see every
// credential), TLS with cfg (nil: plain HTTP only), HTTP/2 where TLS
// offers it.
func Transport(cfg *tls.Config) *http.Transport {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       cfg,
		ForceAttemptHTTP2:     cfg != nil,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if cfg != nil {
		tr.TLSClientConfig = cfg.Clone()
	}
	return tr
}

// Client is an HTTP client over Transport(cfg) that follows no redirect
// (ErrRedirect).
func Client(cfg *tls.Config) *http.Client {
	return &http.Client{
		Transport:     Transport(cfg),
		CheckRedirect: func(*http.Request, []*http.Request) error { return ErrRedirect },
	}
}

// Loopback reports whether host (a name or an IP, without port) is
// loopback.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoopbackAddr reports whether addr (HOST:PORT) is on loopback.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && Loopback(host)
}

// CheckRPCURL refuses a node RPC address that is not https:// or
// http:// on loopback: a credential crosses no network in clear.
func CheckRPCURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return errdefs.Publicf(errdefs.ErrInvalid, "node rpc address %q: want https://HOST:PORT", raw)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && Loopback(u.Hostname()):
		return nil
	}
	return errdefs.Publicf(errdefs.ErrInvalid, "node rpc address %q: plain http off loopback (give the node --tls-cert and --tls-key)", raw)
}
