package apiserver_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestCreateWithMCP: a create with `mcp` (the SDK's Sandbox.create({mcp}),
// on any template: the SDK starts the gateway itself) is accepted on both
// routes; the config, which holds the servers' secrets, is neither kept
// in the sandbox's record nor logged, even at debug level; a config that
// is not an object is a 400 naming the field.
func TestCreateWithMCP(t *testing.T) {
	t.Parallel()
	const secret = "ghp_mcp-config-secret-0123456789"
	e := newEnv(t)
	var logs syncBuffer
	api, err := apiserver.New(apiserver.Config{Store: e.st, Lifecycle: e.lc, Templates: staticTemplates{}, AdminToken: adminToken,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(conformTo(t, api))
	t.Cleanup(e.srv.Close)
	mcp := `{"github/acme/tools":{"runCmd":"node index.js","envs":{"TOKEN":"` + secret + `"}},"memory":{}}`
	for _, path := range []string{"/v2/sandboxes", "/sandboxes"} {
		r := e.do("POST", path, e.key2, `{"templateID":"base","timeout":60,"mcp":`+mcp+`}`)
		var sb client.Sandbox
		if err := json.Unmarshal(r.body, &sb); err != nil || r.status != 201 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		rec, err := e.st.GetSandbox(context.Background(), sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(rec); strings.Contains(string(b), secret) || strings.Contains(string(b), "acme") {
			t.Errorf("%s: the sandbox's record keeps the mcp config: %s", path, b)
		}
		if info := e.do("GET", "/sandboxes/"+sb.SandboxID, e.key2, ""); strings.Contains(string(info.body), secret) {
			t.Errorf("%s: getInfo shows the config: %s", path, info.body)
		}
	}
	for _, bad := range []string{`"memory"`, `["memory"]`, `1`} {
		r := e.do("POST", "/v2/sandboxes", e.key2, `{"templateID":"base","mcp":`+bad+`}`)
		if r.status != 400 || !strings.Contains(string(r.body), "'mcp'") {
			t.Errorf("mcp %s: %d %s", bad, r.status, r.body)
		}
	}
	if r := e.do("POST", "/v2/sandboxes", e.key2, `{"templateID":"base","mcp":null}`); r.status != 201 {
		t.Errorf("mcp null: %d %s", r.status, r.body)
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the log holds the mcp config's secret:\n%s", logs.String())
	}
}
