package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

// startServe runs `warren serve --driver fake` in process on a free port and
// returns its printed exports and a stop function that waits for a clean
// exit.
func startServe(t *testing.T, dataDir string, extra ...string) (map[string]string, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var out, errb syncBuffer
	root := newRoot(&out, &errb)
	root.SetArgs(append([]string{"serve", "--driver", "fake", "--data-dir", dataDir, "--listen", addr}, extra...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "E2B_SANDBOX_URL") {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed nothing: %s", errb.String())
		}
	}
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`export (\w+)=(\S+)`).FindAllStringSubmatch(out.String(), -1) {
		env[m[1]] = m[2]
	}
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("serve did not stop")
		}
	}
	return env, stop
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := "e2b_" + strings.Repeat("0123456789", 4)
	env, stop := startServe(t, dir, "--api-key", key, "--admin-token", "adm-0123456789abcdef0123456789abcdef")
	if env["E2B_API_KEY"] != key || env["E2B_API_URL"] == "" || env["E2B_SANDBOX_URL"] != env["E2B_API_URL"] {
		t.Fatalf("exports = %v", env)
	}
	ctx := context.Background()
	c := client.New(env["E2B_API_URL"], key)
	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	list, _, err := c.List(ctx, client.ListOptions{Metadata: map[string]string{"k": "v"}})
	if err != nil || len(list) != 1 || list[0].SandboxID != sb.SandboxID {
		t.Fatalf("list = %v, %v", list, err)
	}
	// The same listener routes sandbox traffic by header: a killed
	// sandbox answers the proxy's 502.
	if ok, err := c.Kill(ctx, sb.SandboxID); !ok || err != nil {
		t.Fatalf("kill: %t %v", ok, err)
	}
	req, _ := http.NewRequest("GET", env["E2B_SANDBOX_URL"]+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(body), "The sandbox was not found") {
		t.Fatalf("health of killed sandbox: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest("GET", env["E2B_API_URL"]+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer adm-0123456789abcdef0123456789abcdef")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `sandbox_killed_total{kill_reason="request"} 1`) {
		t.Fatalf("metrics: %d %.500s", resp.StatusCode, body)
	}
	if resp, err := http.Get(env["E2B_API_URL"] + "/metrics"); err != nil || resp.StatusCode != 401 {
		t.Fatalf("metrics without a token: %v %v", resp.StatusCode, err)
	}
	stop()

	// A restart without --api-key keeps accepting the seeded key.
	env, stop = startServe(t, dir)
	defer stop()
	if _, _, err := client.New(env["E2B_API_URL"], key).List(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("seeded key after restart: %v", err)
	}
}

func TestServeGeneratesKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env, stop := startServe(t, dir)
	first := env["E2B_API_KEY"]
	stop()
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(first) {
		t.Fatalf("generated key %q", first)
	}
	// Later starts do not print it again (it is kept nowhere in clear),
	// and it keeps working.
	env, stop = startServe(t, dir)
	defer stop()
	if env["E2B_API_KEY"] != "" {
		t.Fatalf("second start printed a key: %q", env["E2B_API_KEY"])
	}
	if _, _, err := client.New(env["E2B_API_URL"], first).List(context.Background(), client.ListOptions{}); err != nil {
		t.Fatalf("generated key after restart: %v", err)
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(first)) {
			t.Errorf("%s holds the generated key in clear", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(&out, &errb)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, err := runCmd(t, "keys", "create", "--data-dir", dir, "--name", "ci")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`id: (\S+)\nkey: (e2b_[0-9a-f]{40})\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("create output %q", out)
	}
	out, err = runCmd(t, "keys", "list", "--data-dir", dir)
	if err != nil || !strings.Contains(out, m[1]) || strings.Contains(out, m[2]) || !strings.Contains(out, m[2][:8]+"…") {
		t.Fatalf("list output %q, %v (must show the mask, not the key)", out, err)
	}
	if _, err := runCmd(t, "keys", "revoke", "--data-dir", dir, m[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := runCmd(t, "keys", "revoke", "--data-dir", dir, m[1]); err == nil {
		t.Fatal("second revoke succeeded")
	}
	if out, _ := runCmd(t, "keys", "list", "--data-dir", dir); strings.Contains(out, m[1]) {
		t.Fatalf("revoked key listed: %q", out)
	}
	if _, err := runCmd(t, "serve", "--driver", "qemu", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "runsc, runc or fake") {
		t.Fatalf("bad driver: %v", err)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and returns the cert and
// key paths and a pool trusting it.
func selfSigned(t *testing.T) (string, string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warren test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"*.e2b.localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestServeTLS serves HTTPS: the API answers over HTTP/2, and sandbox
// traffic on the same listener is routed by header.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t)
	key := "e2b_" + strings.Repeat("ab", 20)
	env, stop := startServe(t, t.TempDir(), "--api-key", key, "--tls-cert", certFile, "--tls-key", keyFile)
	defer stop()
	if !strings.HasPrefix(env["E2B_API_URL"], "https://") {
		t.Fatalf("exports %v", env)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	c := client.New(env["E2B_API_URL"], key)
	c.HTTP = hc
	if _, err := c.Create(context.Background(), client.NewSandbox{TemplateID: "base"}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", env["E2B_API_URL"]+"/v2/sandboxes", nil)
	req.Header.Set("X-API-Key", key)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("list over TLS: %d %s", resp.StatusCode, resp.Proto)
	}
	req, _ = http.NewRequest("GET", env["E2B_SANDBOX_URL"]+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", "gone")
	req.Header.Set("E2b-Sandbox-Port", "49983")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 502 || resp.ProtoMajor != 2 {
		t.Fatalf("sandbox traffic over TLS: %d %s", resp.StatusCode, resp.Proto)
	}
}

func TestTeamCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, err := runCmd(t, "team", "create", "tapi-cli", "--data-dir", dir, "--name", "CLI team", "--max-concurrent", "3")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^team: tapi-cli\nkey: e2b_[0-9a-f]{40}\n$`).MatchString(out) {
		t.Fatalf("create output %q", out)
	}
	if _, err := runCmd(t, "team", "create", "tapi-cli", "--data-dir", dir); err == nil {
		t.Fatal("duplicate team created")
	}
	if _, err := runCmd(t, "team", "create", "Bad/ID", "--data-dir", dir); err == nil {
		t.Fatal("invalid team ID accepted")
	}
	out, err = runCmd(t, "team", "limits", "tapi-cli", "--data-dir", dir, "--max-paused", "7", "--max-timeout", "2h")
	if err != nil || !strings.Contains(out, "max-concurrent: 3\n") || !strings.Contains(out, "max-paused: 7\n") || !strings.Contains(out, "max-timeout: 2h0m0s\n") {
		t.Fatalf("limits output %q, %v", out, err)
	}
	if out, err := runCmd(t, "keys", "list", "--data-dir", dir, "--team", "tapi-cli"); err != nil || !strings.Contains(out, "tapi-cli") {
		t.Fatalf("keys of the team: %q, %v", out, err)
	}
	if out, err := runCmd(t, "team", "list", "--data-dir", dir); err != nil || !strings.Contains(out, "tapi-cli") || !strings.Contains(out, "CLI team") {
		t.Fatalf("list output %q, %v", out, err)
	}
	if _, err := runCmd(t, "team", "delete", "tapi-cli", "--data-dir", dir); err != nil {
		t.Fatal(err)
	}
	if out, _ := runCmd(t, "team", "list", "--data-dir", dir); strings.Contains(out, "tapi-cli") {
		t.Fatalf("deleted team listed: %q", out)
	}
	if _, err := runCmd(t, "team", "limits", "tapi-cli", "--data-dir", dir); err == nil {
		t.Fatal("limits of a deleted team")
	}
	if _, err := runCmd(t, "team", "create", "tapi-cli", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "not reused") {
		t.Fatalf("a deleted team's ID given again: %v", err)
	}
}

// TestServeBoundsHeaders: the listener refuses request headers above its
// bound (431) instead of reading them into memory.
func TestServeBoundsHeaders(t *testing.T) {
	t.Parallel()
	env, stop := startServe(t, t.TempDir(), "--api-key", "e2b_7461706900000000000000000000000000000002")
	defer stop()
	req, _ := http.NewRequest(http.MethodGet, env["E2B_API_URL"]+"/health", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 256<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("256 KiB header: %d, want 431", resp.StatusCode)
	}
	resp, err = http.Get(env["E2B_API_URL"] + "/health")
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("plain request: %v %v", resp, err)
	}
	resp.Body.Close()
}
