package e2eserve

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

// DomainBase is the name the domain mode's hosts are under: api.<base>
// and <port>-<sandboxID>.<base>. glibc resolves every *.localhost name to
// loopback with libnss-myhostname (scripts/install-deps.sh); Node refuses
// a wildcard certificate one label below a TLD (*.localhost), so the
// certificate names *.e2b.localhost.
const DomainBase = "e2b.localhost"

// domainTLS is the throw-away CA and the server certificate of one
// domain-mode server.
type domainTLS struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
}

// newDomainTLS makes a CA valid for the test's length (a day at most) and
// a certificate for *.e2b.localhost and e2b.localhost signed by it, as
// PEM files in dir.
func newDomainTLS(t testing.TB, dir string) *domainTLS {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warren e2e throw-away CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: DomainBase},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames:    []string{"*." + DomainBase, DomainBase},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	d := &domainTLS{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"),
		pool: x509.NewCertPool()}
	d.pool.AddCert(caCert)
	for f, b := range map[string]*pem.Block{
		d.caFile:   {Type: "CERTIFICATE", Bytes: caDER},
		d.certFile: {Type: "CERTIFICATE", Bytes: der},
		d.keyFile:  {Type: "EC PRIVATE KEY", Bytes: kder},
	} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// ResolvesLocalhost reports whether glibc resolves a name under
// e2b.localhost (to loopback), as Node's lookups need in domain mode.
func ResolvesLocalhost() bool {
	out, err := exec.Command("getent", "ahostsv4", "api."+DomainBase).Output()
	return err == nil && strings.Contains(string(out), "127.0.0.1")
}

// DomainPrerequisites is Prerequisites plus what domain mode needs: glibc
// resolving *.localhost (libnss-myhostname on the hosts line of
// /etc/nsswitch.conf).
func DomainPrerequisites(t testing.TB) {
	t.Helper()
	Prerequisites(t)
	Require(t, ResolvesLocalhost(), "api."+DomainBase+" does not resolve: install libnss-myhostname and add myhostname to the hosts line of /etc/nsswitch.conf (scripts/install-deps.sh does both)")
}

// domainEnv is the SDK's environment in domain mode: E2B_DOMAIN (with the
// port) and the CA, and neither E2B_API_URL nor E2B_SANDBOX_URL, so the
// SDK builds https://api.<domain> and https://<port>-<id>.<domain> itself.
func (s *Server) domainEnv(env []string) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN", "NODE_EXTRA_CA_CERTS", "E2B_DEBUG":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "E2B_DOMAIN="+s.Domain, "E2B_API_KEY="+s.opts.APIKey, "NODE_EXTRA_CA_CERTS="+s.tls.caFile)
}

// HTTPClient is an HTTP client for the server's listener: in domain mode
// it trusts the throw-away CA and sends every request to the listener,
// whatever the host under e2b.localhost (Go's own resolver is not glibc's);
// otherwise it is http.DefaultClient.
func (s *Server) HTTPClient() *http.Client {
	if s.tls == nil {
		return http.DefaultClient
	}
	listen := s.opts.Listen
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: s.tls.pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, listen)
		},
	}}
}

// Client is a Go API client of the server (over HTTPClient, at
// https://api.<domain> in domain mode).
func (s *Server) Client() *client.Client {
	if s.tls == nil {
		return client.New(s.Env["E2B_API_URL"], s.opts.APIKey)
	}
	c := client.New("https://api."+s.Domain, s.opts.APIKey)
	c.HTTP = s.HTTPClient()
	return c
}
