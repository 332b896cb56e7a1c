package nodeauth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeauth"
)

func TestTokens(t *testing.T) {
	t.Parallel()
	iss, err := nodeauth.NewIssuer(strings.Repeat("k", nodeauth.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeauth.NewIssuer("short"); !errdefs.IsInvalid(err) {
		t.Errorf("a short key: %v", err)
	}
	id := nodeauth.NewTokenID()
	tok := iss.Token(id, "node-a")
	if got, ok := nodeauth.TokenID(tok); !ok || got != id {
		t.Fatalf("TokenID(%q) = %q %v", tok, got, ok)
	}
	if !iss.Check(tok, id, "node-a") || iss.Check(tok, id, "node-b") || iss.Check(tok, nodeauth.NewTokenID(), "node-a") {
		t.Fatal("a token checks for exactly its ID and node")
	}
	other, _ := nodeauth.NewIssuer(strings.Repeat("o", nodeauth.MinKeyLen))
	if other.Check(tok, id, "node-a") {
		t.Fatal("another key's issuer took the token")
	}
	for _, bad := range []string{"", "wnt_", "wnt_" + id, "node-secret-0123456789", "wnt_" + id + "_" + strings.Repeat("g", 64), "wnt_" + strings.ToUpper(id) + "_" + strings.Repeat("0", 64)} {
		if nodeauth.ValidToken(bad) {
			t.Errorf("%q reads as a node token", bad)
		}
	}
	purposes := []string{nodeauth.PurposeRPC, nodeauth.PurposeProxy, nodeauth.PurposePull, nodeauth.PurposeMetrics}
	seen := map[string]bool{tok: true}
	for _, p := range purposes {
		c := nodeauth.Credential(tok, p)
		if seen[c] || c == "" {
			t.Errorf("credential for %s repeats another or is empty", p)
		}
		seen[c] = true
		if nodeauth.Credential(iss.Token(nodeauth.NewTokenID(), "node-a"), p) == c {
			t.Errorf("two tokens give the same %s credential", p)
		}
	}
	if nodeauth.Credential("", nodeauth.PurposeRPC) != "" || nodeauth.Equal("", "") {
		t.Error("no token: no credential, and an empty one matches nothing")
	}
}

func TestGrants(t *testing.T) {
	t.Parallel()
	key := nodeauth.Credential("wnt_0123456789abcdef_"+strings.Repeat("0", 64), nodeauth.PurposePull)
	now := time.Now()
	g := nodeauth.Grant(key, "build-1", "node.a-1", now.Add(time.Minute))
	if who, err := nodeauth.CheckGrant(key, "build-1", g, now); err != nil || who != "node.a-1" {
		t.Fatalf("CheckGrant = %q %v", who, err)
	}
	for name, c := range map[string]struct {
		key, build, grant string
		at                time.Time
	}{
		"another build":     {key, "build-2", g, now},
		"another key":       {key + "x", "build-1", g, now},
		"expired":           {key, "build-1", g, now.Add(2 * time.Minute)},
		"another requester": {key, "build-1", strings.Replace(g, "node.a-1", "node-b", 1), now},
		"a later expiry":    {key, "build-1", strings.Replace(g, "g1.1", "g1.2", 1), now},
		"no key (no token)": {"", "build-1", g, now},
		"nothing":           {key, "build-1", "", now},
		"junk":              {key, "build-1", "g1.x.y.z", now},
	} {
		if _, err := nodeauth.CheckGrant(c.key, c.build, c.grant, c.at); !errors.Is(err, errdefs.ErrUnauthorized) {
			t.Errorf("%s: %v, want unauthorized", name, err)
		}
	}
}

func TestCheckRPCURL(t *testing.T) {
	t.Parallel()
	for u, ok := range map[string]bool{
		"https://10.0.0.5:3100": true, "https://node-a.example:3100": true, "http://127.0.0.1:3100": true, "http://[::1]:3100": true,
		"http://localhost:3100": true, "http://10.0.0.5:3100": false, "http://node-a.example": false, "ftp://10.0.0.5": false,
		"https://u:p@10.0.0.5:3100": false, "https://10.0.0.5:3100/x": false, "": false, "10.0.0.5:3100": false,
	} {
		if err := nodeauth.CheckRPCURL(u); (err == nil) != ok {
			t.Errorf("CheckRPCURL(%q) = %v, want ok %v", u, err, ok)
		}
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 named cn.
func writeCert(t *testing.T, dir, cn string) (string, string, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	cf, kf := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return cf, kf, c
}

// serveTLS serves h with cfg on loopback until the test ends.
func serveTLS(t *testing.T, cfg *tls.Config, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: cfg, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestServerTLSRotates: a renewed certificate written over the files is
// served from a later handshake, without a restart.
func TestServerTLSRotates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cf, kf, first := writeCert(t, dir, "first")
	cfg, err := nodeauth.ServerTLS(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	served := func() string {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the name only
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got != first.Subject.CommonName {
		t.Fatalf("served %q", got)
	}
	later := time.Now().Add(2 * time.Second)
	writeCert(t, dir, "renewed")
	os.Chtimes(cf, later, later)
	deadline := time.Now().Add(time.Minute)
	for served() != "renewed" {
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate is not served")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := nodeauth.ServerTLS(filepath.Join(dir, "none"), kf); !errdefs.IsInvalid(err) {
		t.Errorf("a missing certificate: %v", err)
	}
}

// TestClient: the hops' client verifies against the CA it is given,
// follows no redirect and takes no proxy from the environment.
func TestClient(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cf, kf, cert := writeCert(t, dir, "node")
	srvCfg, err := nodeauth.ServerTLS(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, srvCfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/", http.StatusFound)
		}
	}))
	url := "https://" + addr
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	good := nodeauth.Client(&tls.Config{RootCAs: pool})
	if resp, err := good.Get(url); err != nil {
		t.Fatalf("with the CA: %v", err)
	} else {
		resp.Body.Close()
	}
	if _, err := good.Get(url + "/redirect"); !errors.Is(err, nodeauth.ErrRedirect) {
		t.Errorf("a redirect: %v, want ErrRedirect", err)
	}
	if _, err := nodeauth.Client(&tls.Config{}).Get(url); err == nil {
		t.Error("a certificate of an unknown CA was taken")
	}
	if tr := good.Transport.(*http.Transport); tr.Proxy != nil {
		t.Error("the client takes a proxy")
	}
	if resp, err := http.Get("http://" + addr + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS listener: %d, want 400", resp.StatusCode)
		}
	}
}
