package e2eserve

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// The nodes of the tests across machines serve TLS with certificates of
// a CA of the test process's own, which the API and the nodes check them
// against (--node-ca), as an operator's CA (or cert-manager) would do.

// testCA is the test process's CA, made on first use.
var testCA = sync.OnceValues(func() (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warren e2e node CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "warren-e2e-ca-")
	if err != nil {
		return nil, err
	}
	c := &ca{key: key, cert: cert, file: filepath.Join(dir, "ca.pem")}
	return c, os.WriteFile(c.file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
})

type ca struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	file string
	mu   sync.Mutex
	next int64
}

// CAFile is the PEM file of the test CA, which the API and nodes take as
// --node-ca.
func CAFile(t testing.TB) string {
	t.Helper()
	c, err := testCA()
	if err != nil {
		t.Fatal(err)
	}
	return c.file
}

// CAPool is the test CA as a certificate pool (for a test's own TLS
// client).
func CAPool(t testing.TB) *x509.CertPool {
	t.Helper()
	c, err := testCA()
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// ClientTLS is a TLS configuration that trusts the test CA only.
func ClientTLS(t testing.TB) *tls.Config {
	return &tls.Config{RootCAs: CAPool(t), MinVersion: tls.VersionTLS12}
}

// IssueCert writes, under dir, a certificate of the test CA for hosts (IP
// addresses or names) and its key, and returns their files.
func IssueCert(t testing.TB, dir string, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	c, err := testCA()
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.next++
	serial := c.next + 1
	c.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// credentialKey is the node credential key of an API started with
// nodeToken (APIOptions.NodeToken, a test's own string): every replica of
// a test gets the same.
func credentialKey(nodeToken string) string {
	sum := sha256.Sum256([]byte("warren e2e node credential key\x00" + nodeToken))
	return hex.EncodeToString(sum[:])
}
