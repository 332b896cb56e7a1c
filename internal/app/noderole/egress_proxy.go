package noderole

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/egressproxy"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
)

// EgressProxyConfig tunes the node's egress proxy (internal/egressproxy),
// which carries the traffic of sandboxes whose network rules name hosts.
type EgressProxyConfig struct {
	// Allow are destinations (CIDRs or IPs) that sandboxes' proxied
	// connections may reach although they are not public: an internal
	// service the operator offers sandboxes, or a test's servers. By
	// default only public addresses are reached. The host's own
	// --egress-allow does not apply to sandboxes.
	Allow []string
	// DNS is the DNS server (host:port) the proxy asks for sandboxes;
	// empty: the host's resolver (/etc/resolv.conf).
	DNS string
	// CAFile holds certificates (PEM) trusted, besides the host's roots,
	// for destinations whose requests a rule transforms.
	CAFile string
}

func (c EgressProxyConfig) check() error {
	if _, err := egress.Parse(c.Allow); err != nil {
		return fmt.Errorf("--egress-proxy-allow: %w", err)
	}
	if c.DNS != "" {
		if _, _, err := net.SplitHostPort(c.DNS); err != nil {
			return fmt.Errorf("--egress-dns %q: want host:port: %w", c.DNS, errdefs.ErrInvalid)
		}
	}
	return nil
}

// egressCASecretFile holds the node's secret the sandboxes' egress CAs
// are derived from (0600; made at the first start).
const egressCASecretFile = "egress-ca.secret"

// newEgressPool puts the slots of pool with egress rules behind a new
// egress proxy.
func newEgressPool(cfg Host, pool netslot.Pool, reg prometheus.Registerer, log *slog.Logger) (*egressproxy.Pool, error) {
	ec := cfg.EgressProxy
	up, err := egress.Parse(ec.Allow)
	if err != nil {
		return nil, err
	}
	secret, err := egressSecret(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	pc := egressproxy.Config{Upstream: up, CASecret: secret, Logger: log.With("component", "egress"), Registry: reg}
	if ec.DNS != "" {
		addr := ec.DNS
		pc.Resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
	}
	if ec.CAFile != "" {
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		b, err := os.ReadFile(ec.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--egress-proxy-ca-file: %w", err)
		}
		if !roots.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--egress-proxy-ca-file %s: no PEM certificate: %w", ec.CAFile, errdefs.ErrInvalid)
		}
		pc.RootCAs = roots
	}
	px, err := egressproxy.New(pc)
	if err != nil {
		return nil, err
	}
	log.Info("egress proxy", "allow", ec.Allow, "dns", ec.DNS, "ca_file", ec.CAFile)
	return egressproxy.NewPool(pool, px), nil
}

// egressSecret reads the node's egress CA secret, making it the first
// time.
func egressSecret(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, egressCASecretFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != egressproxy.SecretSize {
			return nil, fmt.Errorf("%s: %d bytes, want %d: %w", path, len(b), egressproxy.SecretSize, errdefs.ErrInvalid)
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	b = make([]byte, egressproxy.SecretSize)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	// On disk before it is used: a crash must not leave an empty file
	// (the next start would refuse it) or lose the secret the CAs already
	// in sandboxes' trust stores derive from.
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, err
	}
	d, err := os.Open(dataDir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return nil, fmt.Errorf("%s: %w", dataDir, err)
	}
	return b, nil
}
