package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
)

// secretValue is a value no answer, log line or event may contain.
const secretValue = "sk-live-0123456789-do-not-leak"

// TestSecretsAPI: E2B's /secrets shapes and statuses; a value goes in and
// never comes out of any answer or log line.
func TestSecretsAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var seen []string
	do := func(method, path, key, body string, want int) result {
		t.Helper()
		r := e.do(method, path, key, body)
		if r.status != want {
			t.Fatalf("%s %s = %d %s, want %d", method, path, r.status, r.body, want)
		}
		seen = append(seen, string(r.body)+fmtHeader(r.header))
		return r
	}
	r := do("POST", "/secrets", e.key1, `{"name":"OpenAI-Key","value":"`+secretValue+`","metadata":{"env":"prod"}}`, 201)
	var s client.Secret
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatal(err)
	}
	if s.Name != "openai-key" || s.CurrentVersion != 1 || !strings.HasPrefix(s.SecretID, "sec_") || s.Metadata["env"] != "prod" || s.CreatedAt.IsZero() {
		t.Fatalf("created %s", r.body)
	}
	do("POST", "/secrets", e.key1, `{"name":"openai-key","value":"x"}`, 409)
	do("POST", "/secrets", e.key1, `{"name":"no-value"}`, 400)
	do("POST", "/secrets", e.key1, `{"name":"a{b}","value":"x"}`, 400)
	bad := do("POST", "/secrets", e.key1, `{"name":"crlf","value":"`+secretValue+`\r\nX-Evil: 1"}`, 400)
	if !strings.Contains(string(bad.body), "line breaks") {
		t.Errorf("a value with a line break: %s", bad.body)
	}
	do("GET", "/secrets/"+s.SecretID, e.key1, "", 200)
	do("GET", "/secrets/OPENAI-KEY", e.key1, "", 200)
	// Another team sees none of it, by name or ID.
	do("GET", "/secrets/"+s.SecretID, e.key2, "", 404)
	do("GET", "/secrets/openai-key", e.key2, "", 404)
	do("POST", "/secrets/"+s.SecretID, e.key2, `{"value":"stolen"}`, 404)
	do("DELETE", "/secrets/"+s.SecretID, e.key2, "", 404)
	r = do("POST", "/secrets/openai-key", e.key1, `{"value":"`+secretValue+`-2"}`, 200)
	if err := json.Unmarshal(r.body, &s); err != nil || s.CurrentVersion != 2 || s.Metadata["env"] != "prod" {
		t.Fatalf("updated %s", r.body)
	}
	do("POST", "/secrets/missing", e.key1, `{"value":"v"}`, 404)
	for _, n := range []string{"b", "c"} {
		do("POST", "/secrets", e.key1, `{"name":"`+n+`","value":"`+secretValue+`"}`, 201)
	}
	r = do("GET", "/secrets?limit=2", e.key1, "", 200)
	var page []client.Secret
	json.Unmarshal(r.body, &page)
	tok := r.header.Get("X-Next-Token")
	if len(page) != 2 || page[0].Name != "b" || page[1].Name != "c" || tok == "" {
		t.Fatalf("page 1: %s, next %q", r.body, tok)
	}
	r = do("GET", "/secrets?limit=2&nextToken="+tok, e.key1, "", 200)
	json.Unmarshal(r.body, &page)
	if len(page) != 1 || page[0].Name != "openai-key" || r.header.Get("X-Next-Token") != "" {
		t.Fatalf("page 2: %s", r.body)
	}
	do("GET", "/secrets?limit=0", e.key1, "", 400)
	do("GET", "/secrets?nextToken=!!!", e.key1, "", 400)
	r = do("GET", "/secrets", e.key2, "", 200)
	if strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("team 2's list: %s", r.body)
	}
	do("DELETE", "/secrets/openai-key", e.key1, "", 204)
	do("DELETE", "/secrets/openai-key", e.key1, "", 404)
	do("GET", "/secrets/openai-key", e.key1, "", 404)
	do("GET", "/secrets", "", "", 401)
	// An admin acting on no team has no secrets to manage.
	if r := e.do("POST", "/secrets", "", `{"name":"x","value":"v"}`, "X-Admin-Token", adminToken); r.status != 400 {
		t.Fatalf("admin without X-Team-ID = %d %s", r.status, r.body)
	}
	for _, b := range seen {
		if strings.Contains(b, "sk-live") {
			t.Fatalf("an answer carries the value: %s", b)
		}
	}
	if strings.Contains(e.logs.String(), "sk-live") {
		t.Fatalf("the log carries the value:\n%s", e.logs)
	}
	if !strings.Contains(e.logs.String(), "secret created") {
		t.Fatalf("no log line of the create:\n%s", e.logs)
	}
}

func fmtHeader(h http.Header) string {
	var b strings.Builder
	for k, v := range h {
		b.WriteString(k + ": " + strings.Join(v, ",") + "\n")
	}
	return b.String()
}

// TestSecretsWithoutKey: a server without a secrets key refuses the
// secrets API with 501 and says what the operator must set.
func TestSecretsWithoutKey(t *testing.T) {
	t.Parallel()
	st := storetest.SQLite(t)
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: fakenode.New()})
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{Store: st, Lifecycle: lc, Templates: staticTemplates{}, AdminToken: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(conformTo(t, api))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	if err := st.CreateTeam(ctx, &store.Team{ID: "t1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	key, _, err := apiserver.AddKey(ctx, st, "t1", "test", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"POST", "/secrets"}, {"GET", "/secrets"}, {"GET", "/secrets/x"}, {"POST", "/secrets/x"}, {"DELETE", "/secrets/x"}} {
		req, _ := http.NewRequest(c[0], srv.URL+c[1], strings.NewReader(`{"name":"a","value":"v"}`))
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body client.Error
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented || body.Code != 501 || !strings.Contains(body.Message, "secrets key") {
			t.Errorf("%s %s = %d %+v, want 501 naming the secrets key", c[0], c[1], resp.StatusCode, body)
		}
	}
}
