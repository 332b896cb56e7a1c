package proxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/proxy"
)

// tokenRouter finds sandboxes by signature over tokens, counting the
// lookups and the tokens tried (each a hash).
type tokenRouter struct {
	fakeRouter
	tokens          map[string]string
	lookups, hashes *atomic.Int32
}

func (t tokenRouter) SandboxBySignature(_ context.Context, valid func(string) bool) (string, error) {
	t.lookups.Add(1)
	for id, tok := range t.tokens {
		t.hashes.Add(1)
		if valid(tok) {
			return id, nil
		}
	}
	return "", nil
}

type signedEnv struct {
	p               *proxy.Proxy
	lookups, hashes *atomic.Int32
}

func newSignedEnv(t *testing.T, cfg proxy.Config) *signedEnv {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/files", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "sbx2 "+r.Method) })
	be := httptest.NewServer(mux)
	t.Cleanup(be.Close)
	e := &signedEnv{lookups: new(atomic.Int32), hashes: new(atomic.Int32)}
	cfg.Router = tokenRouter{
		fakeRouter: fakeRouter{"sbx2": {SandboxID: "sbx2", Address: be.Listener.Addr().String(), Host: "127.0.0.1"}},
		tokens:     map[string]string{"sbx1": "token-one", "sbx2": "token-two", "sbx3": "token-three"},
		lookups:    e.lookups, hashes: e.hashes,
	}
	cfg.Domain = "e2b.test"
	p, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	return e
}

// do sends a request straight to the proxy from remote (ip:port); a
// target that is a path goes to the shared host 127.0.0.1:3000.
func (e *signedEnv) do(t *testing.T, method, target, remote string, hdr http.Header) *httptest.ResponseRecorder {
	t.Helper()
	if strings.HasPrefix(target, "/") {
		target = "http://127.0.0.1:3000" + target
	}
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	for k, v := range hdr {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	e.p.ServeHTTP(w, r)
	return w
}

// filesURL is the URL of the SDK's uploadUrl/downloadUrl in plain-http
// mode (E2B_SANDBOX_URL): /files on the shared host, no sandbox ID.
func filesURL(path, user, sig string, exp int64) string {
	v := url.Values{"path": {path}, "username": {user}, "signature": {sig}}
	if exp != 0 {
		v.Set("signature_expiration", strconv.FormatInt(exp, 10))
	}
	return "/files?" + v.Encode()
}

// TestSignedURL routes the SDK's signed /files URLs, which carry no
// sandbox ID in plain-http mode, by the token that makes them valid; what
// is refused without a lookup is refused before any hash.
func TestSignedURL(t *testing.T) {
	t.Parallel()
	e := newSignedEnv(t, proxy.Config{})
	if !e.p.Match(httptest.NewRequest("GET", "http://127.0.0.1/files?path=a&signature=x", nil)) {
		t.Fatal("signed /files URL not matched as sandbox traffic")
	}
	const p = "/home/user/a.txt"
	past := time.Now().Add(-time.Minute).Unix()
	tests := []struct {
		name, method, url string
		want              int
		body              string
		lookup            bool
	}{
		{"read", "GET", filesURL(p, "user", auth.Sign(p, auth.OpRead, "user", "token-two", 0), 0), 200, "sbx2 GET", true},
		{"write", "POST", filesURL(p, "user", auth.Sign(p, auth.OpWrite, "user", "token-two", 0), 0), 200, "sbx2 POST", true},
		{"read signature used to write", "POST", filesURL(p, "user", auth.Sign(p, auth.OpRead, "user", "token-two", 0), 0), 401, `"message":"invalid signature"`, true},
		{"unknown token", "GET", filesURL(p, "user", auth.Sign(p, auth.OpRead, "user", "nobody", 0), 0), 401, "invalid signature", true},
		{"expired", "GET", filesURL(p, "user", auth.Sign(p, auth.OpRead, "user", "token-two", past), past), 401, "signature is already expired", false},
		{"path twice", "GET", filesURL(p, "user", auth.Sign(p, auth.OpRead, "user", "token-two", 0), 0) + "&path=%2Fetc%2Fshadow", 401, `parameter \"path\" is given 2 times`, false},
		{"bad expiration", "GET", filesURL(p, "user", auth.Sign(p, auth.OpRead, "user", "token-two", 0), 0) + "&signature_expiration=later", 401, "is not a Unix time", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.lookups.Load()
			w := e.do(t, tc.method, tc.url, "192.0.2.1:1000", nil)
			if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.body) {
				t.Fatalf("%d %s, want %d %s", w.Code, w.Body, tc.want, tc.body)
			}
			if looked := e.lookups.Load() > before; looked != tc.lookup {
				t.Fatalf("looked up: %t, want %t", looked, tc.lookup)
			}
		})
	}
}

// TestSignedURLLookupBudget is the amplification attack: signed /files
// requests with made-up signatures and no sandbox ID, each of which would
// make the server try every sandbox's token. Each client address has a
// budget of lookups; past it the answer is 429 with Retry-After and no
// lookup (no hash) is made, while other addresses keep theirs. A
// signature found once is routed from memory afterwards.
func TestSignedURLLookupBudget(t *testing.T) {
	t.Parallel()
	e := newSignedEnv(t, proxy.Config{SignedLookupBurst: 5, SignedLookupEvery: time.Hour,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}})
	bogus := func(i int) string {
		return filesURL("/x", "", "v1_made-up-"+strconv.Itoa(i), 0)
	}
	for i := range 5 {
		if w := e.do(t, "GET", bogus(i), "198.51.100.7:1000", nil); w.Code != 401 {
			t.Fatalf("bogus %d: %d %s", i, w.Code, w.Body)
		}
	}
	hashes := e.hashes.Load()
	for i := range 100 {
		w := e.do(t, "GET", bogus(100+i), "198.51.100.7:2000", nil)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "E2b-Sandbox-Id") {
			t.Fatalf("bogus request past the budget: %d %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	if n := e.hashes.Load() - hashes; n != 0 {
		t.Fatalf("100 throttled requests hashed %d tokens, want 0", n)
	}
	// A browser's preflight of a signed upload is answered without a
	// lookup, throttled address or not.
	pre := http.Header{"Origin": {"https://app.example"}, "Access-Control-Request-Method": {"POST"}}
	if w := e.do(t, "OPTIONS", bogus(1), "198.51.100.7:2500", pre); w.Code/100 != 2 {
		t.Fatalf("preflight of a signed URL: %d %s", w.Code, w.Body)
	}
	// Forged X-Forwarded-For from an untrusted peer changes nothing.
	if w := e.do(t, "GET", bogus(1), "198.51.100.7:3000", http.Header{"X-Forwarded-For": {"203.0.113.9"}}); w.Code != 429 {
		t.Fatalf("forged X-Forwarded-For: %d", w.Code)
	}
	// Another client, directly and through the trusted proxy, is served.
	const p = "/home/user/a.txt"
	good := filesURL(p, "user", auth.Sign(p, auth.OpRead, "user", "token-two", 0), 0)
	if w := e.do(t, "GET", good, "203.0.113.9:1000", nil); w.Code != 200 {
		t.Fatalf("another client: %d %s", w.Code, w.Body)
	}
	if w := e.do(t, "GET", filesURL("/b", "", auth.Sign("/b", auth.OpRead, "", "token-two", 0), 0), "10.0.0.1:1000",
		http.Header{"X-Forwarded-For": {"203.0.113.10"}}); w.Code != 200 {
		t.Fatalf("a client behind the trusted proxy: %d %s", w.Code, w.Body)
	}
	// The signature found once is routed from memory, even for the
	// throttled address: it costs no lookup.
	lookups := e.lookups.Load()
	for range 20 {
		if w := e.do(t, "GET", good, "198.51.100.7:4000", nil); w.Code != 200 {
			t.Fatalf("a known signature from the throttled address: %d %s", w.Code, w.Body)
		}
	}
	if n := e.lookups.Load() - lookups; n != 0 {
		t.Fatalf("20 uses of a known signature made %d lookups, want 0", n)
	}
	// With the sandbox ID (the E2b-Sandbox-Id header of the SDK's own
	// calls, or the <port>-<id>.<domain> host of TLS mode) no lookup is
	// made at all: envd checks the signature.
	if w := e.do(t, "GET", bogus(1), "198.51.100.7:5000", http.Header{"E2b-Sandbox-Id": {"sbx2"}, "E2b-Sandbox-Port": {"49983"}}); w.Code != 200 {
		t.Fatalf("with the sandbox ID header: %d %s", w.Code, w.Body)
	}
	if w := e.do(t, "GET", "http://49983-sbx2.e2b.test"+bogus(2), "198.51.100.7:5000", nil); w.Code != 200 {
		t.Fatalf("on the sandbox's host: %d %s", w.Code, w.Body)
	}
	if n := e.lookups.Load() - lookups; n != 0 {
		t.Fatalf("requests naming their sandbox made %d lookups", n)
	}
}
