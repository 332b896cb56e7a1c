//go:build e2e

package codeinterpe2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/pkg/client"
)

// interpreterPort is the code interpreter server's port in a sandbox.
const interpreterPort = "49999"

// sandboxCall sends one request through the edge proxy to port of
// sandbox id, as a stranger who knows only the ID would (no API key),
// with the access token when token is not empty. It returns the status,
// the body and the answer's header.
func sandboxCall(t *testing.T, s *e2eserve.Server, id, port, token, method, path, ctype, body string, extra ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, s.Env["E2B_SANDBOX_URL"]+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", port)
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s:%s: %v", method, path, id, port, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// stdoutOf joins the stdout lines of an /execute answer (one JSON object
// a line) and fails the test on an error line.
func stdoutOf(t *testing.T, answer string) string {
	t.Helper()
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(answer))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m struct{ Type, Text, Name, Value string }
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			t.Fatalf("execute answered a line that is not JSON: %q", sc.Text())
		}
		switch m.Type {
		case "stdout":
			out.WriteString(m.Text)
		case "error":
			t.Fatalf("execute: %s: %s", m.Name, m.Value)
		}
	}
	return out.String()
}

// testInterpreterAuth is the attack suite of the code interpreter's port:
// through the proxy, with only E2b-Sandbox-Id and E2b-Sandbox-Port 49999
// (no API key), every route but /health needs the sandbox's own envd
// access token, exactly when envd does; a token of another sandbox, a
// cross-site content type and a browser's preflight get nothing run; and
// the kernels' channels listen on no port.
func testInterpreterAuth(t *testing.T, s *e2eserve.Server) {
	ctx := context.Background()
	c := client.New(s.Env["E2B_API_URL"], apiKey)
	mk := func(secure bool) *client.Sandbox {
		t.Helper()
		timeout := 300
		// POST /sandboxes (v1) takes secure; /v2/sandboxes is always secure.
		sb := &client.Sandbox{}
		if _, _, err := c.Do(ctx, "POST", "/sandboxes", client.NewSandbox{TemplateID: "code-interpreter-v1", Timeout: &timeout, Secure: &secure}, sb); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Kill(context.Background(), sb.SandboxID) })
		return sb
	}
	a, b, open := mk(true), mk(true), mk(false)
	if a.EnvdAccessToken == "" || b.EnvdAccessToken == "" || a.EnvdAccessToken == b.EnvdAccessToken || open.EnvdAccessToken != "" {
		t.Fatalf("tokens: secure %q and %q, not secure %q", a.EnvdAccessToken, b.EnvdAccessToken, open.EnvdAccessToken)
	}
	const jsonType = "application/json"
	run := func(sb *client.Sandbox, code string) string {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"language": "bash", "code": code})
		st, ans, _ := sandboxCall(t, s, sb.SandboxID, interpreterPort, sb.EnvdAccessToken, "POST", "/execute", jsonType, string(body))
		if st != http.StatusOK {
			t.Fatalf("execute with the sandbox's token: %d %s", st, ans)
		}
		return stdoutOf(t, ans)
	}

	// The reproduction: no key, no token.
	owned := `{"language":"bash","code":"id; touch /tmp/owned; sudo -n head -c 20 /etc/shadow"}`
	if st, ans, _ := sandboxCall(t, s, a.SandboxID, interpreterPort, "", "POST", "/execute", jsonType, owned); st != http.StatusUnauthorized || strings.Contains(ans, "uid=") {
		t.Fatalf("execute without a token: %d %s, want 401", st, ans)
	}
	// envd on the same sandbox agrees.
	if st, ans, _ := sandboxCall(t, s, a.SandboxID, "49983", "", "GET", "/envs", "", ""); st != http.StatusUnauthorized {
		t.Fatalf("envd without a token: %d %s, want 401", st, ans)
	}

	// Every route but /health: no token, another sandbox's token, a made-up
	// one, and the token in another header (Authorization) are refused.
	routes := []struct{ method, path, body string }{
		{"POST", "/execute", owned},
		{"GET", "/contexts", ""},
		{"POST", "/contexts", `{"language":"bash","cwd":"/tmp"}`},
		{"DELETE", "/contexts/0a5e8b47-0000-4000-8000-000000000000", ""},
		{"POST", "/contexts/0a5e8b47-0000-4000-8000-000000000000/restart", ""},
		{"GET", "/no-such-route", ""},
		{"GET", "/health/../contexts", ""},
	}
	for _, rt := range routes {
		for _, tok := range []string{"", b.EnvdAccessToken, strings.Repeat("0", len(a.EnvdAccessToken)), a.EnvdAccessToken[:len(a.EnvdAccessToken)-1]} {
			st, ans, _ := sandboxCall(t, s, a.SandboxID, interpreterPort, tok, rt.method, rt.path, jsonType, rt.body)
			if st != http.StatusUnauthorized {
				t.Errorf("%s %s with token %.8q: %d %s, want 401", rt.method, rt.path, tok, st, ans)
			}
		}
		st, ans, _ := sandboxCall(t, s, a.SandboxID, interpreterPort, "", rt.method, rt.path, jsonType, rt.body, "Authorization", "Bearer "+a.EnvdAccessToken)
		if st != http.StatusUnauthorized {
			t.Errorf("%s %s with the token as a bearer: %d %s, want 401", rt.method, rt.path, st, ans)
		}
	}
	if st, ans, _ := sandboxCall(t, s, a.SandboxID, interpreterPort, "", "GET", "/health", "", ""); st != http.StatusOK {
		t.Errorf("health without a token: %d %s, want 200", st, ans)
	}
	// A context listed with the token was not made by the refused POSTs.
	if st, ans, _ := sandboxCall(t, s, a.SandboxID, interpreterPort, a.EnvdAccessToken, "GET", "/contexts", "", ""); st != http.StatusOK || strings.Contains(ans, `"/tmp"`) {
		t.Errorf("contexts with the token: %d %s (a refused create must make none)", st, ans)
	}

	// A cross-site request (a form post, text/plain, no type) runs nothing,
	// even with the token, which a page could not send anyway.
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx", "text/json"} {
		st, ans, _ := sandboxCall(t, s, a.SandboxID, interpreterPort, a.EnvdAccessToken, "POST", "/execute", ct, `{"language":"bash","code":"touch /tmp/cross"}`)
		if st != http.StatusUnsupportedMediaType {
			t.Errorf("execute as %q: %d %s, want 415", ct, st, ans)
		}
	}
	if out := run(a, "for f in /tmp/owned /tmp/cross; do test -e $f && echo $f; done; echo checked"); out != "checked\n" {
		t.Fatalf("refused requests ran code: %q", out)
	}
	if st, ans, _ := sandboxCall(t, s, a.SandboxID, interpreterPort, a.EnvdAccessToken, "POST", "/execute", "Application/JSON; charset=utf-8", `{"language":"bash","code":"echo ok"}`); st != http.StatusOK || stdoutOf(t, ans) != "ok\n" {
		t.Errorf("execute as application/json with a charset: %d %s", st, ans)
	}

	// A browser's preflight is answered (any origin: the token is a header,
	// never a cookie), and so is the request after it, readably.
	st, _, h := sandboxCall(t, s, a.SandboxID, interpreterPort, "", "OPTIONS", "/execute", "", "",
		"Origin", "https://app.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "content-type, x-access-token, e2b-sandbox-id, e2b-sandbox-port")
	if st != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "*" || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "x-access-token") || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("preflight: %d %v", st, h)
	}
	st, _, h = sandboxCall(t, s, a.SandboxID, interpreterPort, "", "GET", "/contexts", "", "", "Origin", "https://app.example")
	if st != http.StatusUnauthorized || h.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("refusal not readable cross-origin: %d %v", st, h)
	}

	// The kernels' channels (shell, control, ...) are Unix sockets, not
	// loopback ports, which envd would forward to the sandbox's address.
	body, _ := json.Marshal(map[string]string{"code": "import ipykernel.connect\nipykernel.connect.get_connection_info(unpack=True)['transport']"})
	if st, ans, _ := sandboxCall(t, s, a.SandboxID, interpreterPort, a.EnvdAccessToken, "POST", "/execute", jsonType, string(body)); st != http.StatusOK || !strings.Contains(ans, `"text": "'ipc'"`) {
		t.Errorf("transport of the default kernel: %d %s, want ipc", st, ans)
	}

	// A sandbox created without secure has no token: the interpreter is
	// open as its envd is.
	if st, ans, _ := sandboxCall(t, s, open.SandboxID, interpreterPort, "", "POST", "/execute", jsonType, `{"language":"bash","code":"echo open"}`); st != http.StatusOK || stdoutOf(t, ans) != "open\n" {
		t.Errorf("execute in a sandbox without a token: %d %s", st, ans)
	}
	if st, ans, _ := sandboxCall(t, s, open.SandboxID, "49983", "", "GET", "/envs", "", ""); st != http.StatusOK {
		t.Errorf("envd of a sandbox without a token: %d %s", st, ans)
	}
}
