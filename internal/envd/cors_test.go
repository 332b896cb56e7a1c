package envd

import (
	"testing"
)

// TestCORS: with an access token set, a browser's preflight of an RPC is
// answered without it, and the RPC's answer is readable cross-origin.
func TestCORS(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, "")
	do(t, "POST", srv.URL+"/init", `{"accessToken":"tok"}`, nil)
	status, _, h := do(t, "OPTIONS", srv.URL+"/process.Process/List", "", map[string]string{
		"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "x-access-token, authorization, content-type, connect-protocol-version",
	})
	if status != 204 || h.Get("Access-Control-Allow-Origin") != "*" || h.Get("Access-Control-Allow-Headers") != "x-access-token, authorization, content-type, connect-protocol-version" {
		t.Fatalf("preflight: %d %v", status, h)
	}
	status, body, h := do(t, "POST", srv.URL+"/process.Process/List", `{}`, map[string]string{
		"Origin": "https://app.example", "X-Access-Token": "tok", "Content-Type": "application/json",
	})
	if status != 200 || h.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("rpc: %d %s %v", status, body, h)
	}
	if status, _, h := do(t, "GET", srv.URL+"/envs", "", map[string]string{"Origin": "https://app.example"}); status != 401 || h.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("refusal not readable cross-origin: %d %v", status, h)
	}
}
