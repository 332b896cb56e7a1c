//go:build e2e

package tenancye2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestSignedURLsThroughServer is the signed-URL and admin-token part of
// the attack suite on a real warren serve with runsc: the SDK's
// uploadUrl/downloadUrl used by someone who holds one (signed.mjs), the
// same URLs on the <port>-<id>.<domain> host, and guesses at the admin
// token from one loopback address while the operator uses another.
func TestSignedURLsThroughServer(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := e2eserve.Start(t, e2eserve.Options{DataDir: t.TempDir(), APIKey: apiKey, AdminToken: adminToken, Isolation: iso})
	api := s.Env["E2B_API_URL"]
	code, body := e2eserve.Call(t, "POST", api+"/admin/teams", map[string]string{"X-Admin-Token": adminToken}, `{"id":"tsig-b"}`)
	var teamB struct {
		APIKey string `json:"apiKey"`
	}
	if err := json.Unmarshal(body, &teamB); code != http.StatusCreated || err != nil {
		t.Fatalf("POST /admin/teams: %d %s", code, body)
	}
	// The server's own cleanup kills team A's sandboxes only; a server
	// stopped with a sandbox left keeps it running.
	t.Cleanup(func() {
		b := client.New(api, teamB.APIKey)
		list, _, err := b.List(context.Background(), client.ListOptions{})
		if err != nil {
			t.Errorf("team B's sandboxes: %v", err)
		}
		for _, sb := range list {
			b.Kill(context.Background(), sb.SandboxID)
		}
	})
	out := runNode(t, s, []string{"TEAM_B_KEY=" + teamB.APIKey}, "signed.mjs")
	var id, token string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "A "); ok {
			id = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "A_TOKEN "); ok {
			token = v
		}
	}
	if id == "" || token == "" || !strings.Contains(out, "signed ok") {
		t.Fatalf("signed.mjs:\n%s", out)
	}

	// The same grant on the sandbox's own host (<port>-<id>.<domain>, the
	// TLS+domain mode's URL): envd checks it, no lookup is made.
	u, _ := url.Parse(api)
	host := fmt.Sprintf("49983-%s.localhost:%s", id, u.Port())
	get := func(q url.Values) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", api+"/files?"+q.Encode(), nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	exp := time.Now().Add(time.Minute).Unix()
	signed := func(path, user string, exp int64) url.Values {
		return url.Values{"path": {path}, "username": {user}, "signature_expiration": {strconv.FormatInt(exp, 10)},
			"signature": {envdproto.Sign(path, envdproto.OpRead, user, token, exp)}}
	}
	if code, b := get(signed("/home/user/a.txt", "user", exp)); code != 200 || b != "signed content" {
		t.Fatalf("signed download on the sandbox host: %d %q", code, b)
	}
	q := signed("/home/user/a.txt", "user", exp)
	q.Set("path", "/home/user/secret.txt")
	if code, b := get(q); code != 401 {
		t.Fatalf("path swapped on the sandbox host: %d %q", code, b)
	}
	q = signed("/home/user/a.txt", "user", exp)
	q.Set("username", "root")
	if code, b := get(q); code != 401 {
		t.Fatalf("user swapped on the sandbox host: %d %q", code, b)
	}

	// Guessing the admin token from 127.0.0.1: after the failure budget,
	// 429 for the right token too; the operator on 127.0.0.2 and team
	// keys on 127.0.0.1 are not affected.
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	call := func(c *http.Client, hdr, val string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", api+"/admin/teams", nil)
		if hdr == "X-API-Key" {
			req, _ = http.NewRequest("GET", api+"/sandboxes", nil)
		}
		req.Header.Set(hdr, val)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	attacker, operator := from("127.0.0.1"), from("127.0.0.2")
	var got int
	for i := 0; i < 50; i++ {
		if got, _ = call(attacker, "X-Admin-Token", "guess-"+strconv.Itoa(i)); got != http.StatusUnauthorized {
			break
		}
	}
	if code, retry := call(attacker, "X-Admin-Token", adminToken); got != http.StatusTooManyRequests || code != http.StatusTooManyRequests || retry == "" {
		t.Fatalf("admin token guesses: last %d; then the right token %d (Retry-After %q); want 429s", got, code, retry)
	}
	if code, _ := call(operator, "X-Admin-Token", adminToken); code != http.StatusOK {
		t.Fatalf("the operator from 127.0.0.2: %d", code)
	}
	if code, _ := call(attacker, "X-API-Key", apiKey); code != http.StatusOK {
		t.Fatalf("team A's key from the guessing address: %d", code)
	}
}

// runNode runs a node script with the server's exports and env.
func runNode(t *testing.T, s *e2eserve.Server, env []string, script string) string {
	t.Helper()
	out, code := s.Run(t, env, "node", script)
	if code != 0 {
		t.Fatalf("node %s: exit %d\n%s", script, code, out)
	}
	return out
}
