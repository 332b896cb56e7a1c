package egressproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// SecretSize is the size of the node's CA secret.
const SecretSize = 32

// sandboxCA is the certificate authority the egress proxy terminates a
// sandbox's TLS with, for the hosts its rules transform. It is derived
// from the node's secret and the sandbox ID, so it is the same after a
// restart of the node agent, a pause and a resume (the sandbox's trust
// store holds it since its create), and it differs between sandboxes (a
// fork has its own): one sandbox's CA is never trusted by another.
type sandboxCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte

	mu      sync.Mutex
	leafKey *ecdsa.PrivateKey
	leaves  map[string]*tls.Certificate // by host name
}

// deriveCA makes sandbox id's CA from secret.
func deriveCA(secret []byte, id string) (*sandboxCA, error) {
	if len(secret) != SecretSize {
		return nil, fmt.Errorf("egress CA secret: want %d bytes, got %d", SecretSize, len(secret))
	}
	// A scalar in [1, n-1] from 40 bytes of HKDF output (the bias of the
	// reduction is below 2^-64).
	seed, err := hkdf.Key(sha256.New, secret, nil, "warren egress ca v1 key "+id, 40)
	if err != nil {
		return nil, err
	}
	n := elliptic.P256().Params().N
	d := new(big.Int).SetBytes(seed)
	d.Mod(d, new(big.Int).Sub(n, big.NewInt(1)))
	d.Add(d, big.NewInt(1))
	key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d.FillBytes(make([]byte, 32)))
	if err != nil {
		return nil, err
	}
	serial, err := hkdf.Key(sha256.New, secret, nil, "warren egress ca v1 serial "+id, 16)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	ski := sha1.Sum(pub)
	tmpl := &x509.Certificate{
		SerialNumber:          new(big.Int).SetBytes(serial),
		Subject:               pkix.Name{Organization: []string{"Warren"}, CommonName: "Warren egress proxy CA for sandbox " + id},
		NotBefore:             time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId:          ski[:],
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &sandboxCA{
		cert: cert, key: key, leafKey: leafKey, leaves: map[string]*tls.Certificate{},
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	}, nil
}

// leafLifetime is how long a minted leaf is valid; it is minted again a
// day before it ends.
const leafLifetime = 7 * 24 * time.Hour

// leaf returns a certificate for host signed by the CA.
func (ca *sandboxCA) leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	now := time.Now()
	if c, ok := ca.leaves[host]; ok && c.Leaf.NotAfter.After(now.Add(24*time.Hour)) {
		return c, nil
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &ca.leafKey.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if len(ca.leaves) >= 1024 {
		clear(ca.leaves)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: ca.leafKey, Leaf: leaf}
	ca.leaves[host] = c
	return c, nil
}
