package apiserver_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/apiserver"
)

// TestAuthThrottle is the online-guessing attack on the admin token and
// team keys: each client address may fail a few times, then every
// attempt with that kind of credential from it answers 429 with
// Retry-After (the right credential too, or the throttle would still tell
// a right guess from a wrong one). Other addresses, the operator's among
// them, are not affected; one address's admin failures do not block its
// team key, and a client behind a trusted reverse proxy is told apart by
// X-Forwarded-For.
func TestAuthThrottle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api, err := apiserver.New(apiserver.Config{Store: e.st, Lifecycle: e.lc, Templates: staticTemplates{}, AdminToken: adminToken,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.9.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	// do sends, from remote, GET /admin/teams with an admin credential,
	// else GET /sandboxes; hdr is header names and values.
	do := func(remote string, hdr ...string) *httptest.ResponseRecorder {
		t.Helper()
		r := httptest.NewRequest("GET", "/sandboxes", nil)
		if len(hdr) > 0 && (hdr[0] == "X-Admin-Token" || hdr[0] == "Authorization") {
			r = httptest.NewRequest("GET", "/admin/teams", nil)
		}
		r.RemoteAddr = remote
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		return w
	}
	const attacker, operator = "198.51.100.66:4242", "203.0.113.1:5000"
	for i := range apiserver.AdminFailureBurst {
		if w := do(attacker, "X-Admin-Token", "guess-"+strconv.Itoa(i)); w.Code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %s", i, w.Code, w.Body)
		}
	}
	for _, tok := range []string{"one-more-guess", adminToken} {
		w := do(attacker, "X-Admin-Token", tok)
		if secs, _ := strconv.Atoi(w.Header().Get("Retry-After")); w.Code != http.StatusTooManyRequests || secs < 1 ||
			!strings.Contains(w.Body.String(), "too many failed admin token attempts") {
			t.Fatalf("admin token %q past the failures: %d %q %s", tok, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	// Through the Bearer form too (a scraper's).
	if w := do(attacker, "Authorization", "Bearer "+adminToken); w.Code != http.StatusTooManyRequests {
		t.Fatalf("Bearer admin token from the throttled address: %d", w.Code)
	}
	if w := do(operator, "X-Admin-Token", adminToken); w.Code != http.StatusOK {
		t.Fatalf("the operator, from another address: %d %s", w.Code, w.Body)
	}
	if w := do(attacker, "X-API-Key", e.key1); w.Code != http.StatusOK {
		t.Fatalf("the attacker's address with its team key: %d %s", w.Code, w.Body)
	}
	// IPv6: the /64 is one client.
	for i := range apiserver.AdminFailureBurst {
		do("[2001:db8:6:6::"+strconv.Itoa(i+1)+"]:1", "X-Admin-Token", "guess")
	}
	if w := do("[2001:db8:6:6:ffff::1]:1", "X-Admin-Token", adminToken); w.Code != http.StatusTooManyRequests {
		t.Fatalf("another address of the same /64: %d", w.Code)
	}
	if w := do("[2001:db8:6:7::1]:1", "X-Admin-Token", adminToken); w.Code != http.StatusOK {
		t.Fatalf("another /64: %d", w.Code)
	}
	// Behind the trusted proxy: the forwarded address is the client.
	const proxy = "10.9.0.1:3000"
	for range apiserver.AdminFailureBurst {
		do(proxy, "X-Admin-Token", "guess", "X-Forwarded-For", "198.51.100.77")
	}
	if w := do(proxy, "X-Admin-Token", adminToken, "X-Forwarded-For", "198.51.100.77"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("the throttled client behind the proxy: %d", w.Code)
	}
	if w := do(proxy, "X-Admin-Token", adminToken, "X-Forwarded-For", "203.0.113.2"); w.Code != http.StatusOK {
		t.Fatalf("the operator behind the same proxy: %d %s", w.Code, w.Body)
	}

	// Team keys: invalid ones (malformed or unknown) spend the budget.
	const scanner = "198.51.100.99:1"
	for i := range apiserver.KeyFailureBurst {
		key := "e2b_" + strings.Repeat("0", 39) + strconv.Itoa(i%10)
		if i%2 == 1 {
			key = "not-a-key"
		}
		if w := do(scanner, "X-API-Key", key); w.Code != http.StatusUnauthorized {
			t.Fatalf("bad key %d: %d %s", i, w.Code, w.Body)
		}
	}
	if w := do(scanner, "X-API-Key", e.key1); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" ||
		!strings.Contains(w.Body.String(), "too many failed API key attempts") {
		t.Fatalf("a valid key from the throttled address: %d %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if w := do(operator, "X-API-Key", e.key1); w.Code != http.StatusOK {
		t.Fatalf("a valid key from another address: %d", w.Code)
	}
	// No credential at all is not a failed attempt.
	for range 2 * apiserver.KeyFailureBurst {
		if w := do("198.51.100.100:1"); w.Code != http.StatusUnauthorized {
			t.Fatalf("no key: %d", w.Code)
		}
	}
	if w := do("198.51.100.100:1", "X-API-Key", e.key2); w.Code != http.StatusOK {
		t.Fatalf("a valid key after requests without one: %d", w.Code)
	}
}
