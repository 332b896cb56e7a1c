package apiserver_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestTemplateRefsAndDefaults: malformed name:tag references are a 400
// naming the field; a build without cpuCount/memoryMB gets E2B's 2 and
// 1024 MiB.
func TestTemplateRefsAndDefaults(t *testing.T) {
	e := newTemplateEnv(t)
	for _, tc := range []struct{ name, method, path, body, field string }{
		{"empty tag", "POST", "/v3/templates", `{"name":"x:"}`, "'name'"},
		{"empty name", "POST", "/v3/templates", `{"name":":v1"}`, "'name'"},
		{"two colons", "POST", "/v3/templates", `{"name":"x:a:b"}`, "'name'"},
		{"tag with colon", "POST", "/v3/templates", `{"name":"x","tags":["a:b"]}`, "'tags'"},
		{"empty tag in list", "POST", "/v3/templates", `{"name":"x","tags":[""]}`, "'tags'"},
		{"assign to empty tag", "POST", "/templates/tags", `{"target":"x:","tags":["v2"]}`, "'target'"},
		{"assign to empty name", "POST", "/templates/tags", `{"target":":v1","tags":["v2"]}`, "'target'"},
		{"delete of empty name", "DELETE", "/templates/tags", `{"name":":v1","tags":["v2"]}`, "'name'"},
		{"sandbox of an empty tag", "POST", "/v2/sandboxes", `{"templateID":"base:"}`, "'templateID'"},
		{"sandbox of an empty name", "POST", "/sandboxes", `{"templateID":":default","timeout":30}`, "'templateID'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, e.key1, tc.body)
			if r.status != 400 || !strings.Contains(string(r.body), tc.field) || !strings.Contains(string(r.body), `"code":400`) {
				t.Fatalf("%d %s", r.status, r.body)
			}
		})
	}
	c := e.createTemplate(e.key1, `{"name":"defaults"}`)
	r := e.do("GET", "/templates", e.key1, "")
	var list []struct {
		TemplateID string `json:"templateID"`
		CPUCount   int    `json:"cpuCount"`
		MemoryMB   int64  `json:"memoryMB"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for _, tpl := range list {
		if tpl.TemplateID == c.TemplateID {
			if tpl.CPUCount != 2 || tpl.MemoryMB != 1024 {
				t.Fatalf("defaults: %+v", tpl)
			}
			return
		}
	}
	t.Fatalf("template %s not listed: %s", c.TemplateID, r.body)
}

// TestResumeWithoutMemoryRefused: memory=false (resume from disk only) is
// refused on every resume route, as the spec says for servers without it.
func TestResumeWithoutMemoryRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.create(e.key2, client.NewSandbox{})
	for _, path := range []string{"/sandboxes/" + sb.SandboxID + "/resume", "/sandboxes/" + sb.SandboxID + "/connect", "/v2/sandboxes/" + sb.SandboxID + "/connect"} {
		r := e.do("POST", path, e.key2, `{"timeout":60,"memory":false}`)
		if r.status != 400 || !strings.Contains(string(r.body), "'memory'") {
			t.Errorf("%s: %d %s", path, r.status, r.body)
		}
	}
}

// TestUnsupportedFieldsRefused: fields Warren cannot honour, and bad
// values of those it does, are a 400 naming them, never accepted and
// ignored; the routing fields the proxy applies are accepted and kept.
func TestUnsupportedFieldsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct{ name, body, field string }{
		{"rules key a bare wildcard", `{"templateID":"base","network":{"rules":{"*":[{"transform":{"headers":{"a":"b"}}}]}}}`, `invalid value for field 'network.rules' (a host key): \"*\": a wildcard is only a leading`},
		{"allowOut a bare wildcard", `{"templateID":"base","network":{"allowOut":["*"]}}`, `invalid value for field 'network.allowOut[0]': \"*\": a wildcard is only a leading`},
		{"allowOut not a name", `{"templateID":"base","network":{"allowOut":["1.2.3.4","a b.example"]}}`, `invalid value for field 'network.allowOut[1]': \"a b.example\" is not a CIDR, an IP address or a domain name`},
		{"denyOut a domain", `{"templateID":"base","network":{"denyOut":["example.com"]}}`, `invalid value for field 'network.denyOut[0]': \"example.com\" is not a CIDR or IP address`},
		{"rules header with a line break", `{"templateID":"base","network":{"rules":{"a.example":[{"transform":{"headers":{"a":"b\r\nX: y"}}}]}}}`, "network.rules.a.example[0].transform.headers.a"},
		{"rules unknown secret", `{"templateID":"base","network":{"rules":{"a.example":[{"transform":{"headers":{"a":"${e2b.secrets.nope}"}}}]}}}`, "not found (placeholder ${e2b.secrets.nope})"},
		{"egressProxy without port", `{"templateID":"base","network":{"egressProxy":{"address":"proxy.example"}}}`, "network.egressProxy.address"},
		{"egressProxy password without user", `{"templateID":"base","network":{"egressProxy":{"address":"proxy.example:1080","password":"p"}}}`, "network.egressProxy.password"},
		{"iam", `{"templateID":"base","iam":{"tokens":{"t":{"audience":"x","tokenType":"oidc"}}}}`, "iam"},
		{"mcp not an object", `{"templateID":"base","mcp":["memory"]}`, "'mcp'"},
		{"bad https port", `{"templateID":"base","network":{"httpsPorts":[49983]}}`, "network.httpsPorts[0]"},
		{"bad mask", `{"templateID":"base","network":{"maskRequestHost":" "}}`, "network.maskRequestHost"},
		{"mask injects a header", `{"templateID":"base","network":{"maskRequestHost":"a.example\r\nX-Evil: 1"}}`, "network.maskRequestHost"},
		{"mask too long", `{"templateID":"base","network":{"maskRequestHost":"` + strings.Repeat("a", 300) + `"}}`, "network.maskRequestHost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v2/sandboxes", e.key2, tc.body)
			if r.status != 400 || !strings.Contains(string(r.body), tc.field) {
				t.Fatalf("%d %s", r.status, r.body)
			}
		})
	}
	r := e.do("POST", "/v2/sandboxes", e.key2, `{"templateID":"base","mcp":null,"network":{"httpsPorts":[8443],"maskRequestHost":"localhost:${PORT}"}}`)
	var sb client.Sandbox
	if err := json.Unmarshal(r.body, &sb); err != nil || r.status != 201 {
		t.Fatalf("create with routing fields: %d %s", r.status, r.body)
	}
	route, err := e.lc.Route(t.Context(), sb.SandboxID, nil)
	if err != nil || route.MaskRequestHost != "localhost:${PORT}" || len(route.HTTPSPorts) != 1 || route.HTTPSPorts[0] != 8443 {
		t.Fatalf("route %+v %v", route, err)
	}
	if r := e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", e.key2, `{"rules":{"*.":[]}}`); r.status != 400 || !strings.Contains(string(r.body), "rules") {
		t.Fatalf("network update with rules: %d %s", r.status, r.body)
	}
}

// TestLogLinesAreJSON: every v1 log line is a JSON object with level and
// message (the CLI's `sandbox logs` parses each one).
func TestLogLinesAreJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := e.create(e.key2, client.NewSandbox{})
	if _, err := e.client(e.key2).Pause(t.Context(), sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", "/sandboxes/"+sb.SandboxID+"/logs", e.key2, "")
	var logs client.SandboxLogs
	if err := json.Unmarshal(r.body, &logs); err != nil || r.status != 200 || len(logs.Logs) < 2 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for _, l := range logs.Logs {
		var line map[string]string
		if err := json.Unmarshal([]byte(l.Line), &line); err != nil || line["level"] == "" || line["message"] == "" {
			t.Fatalf("line %q: %v", l.Line, err)
		}
	}
}

// TestCORS: a browser's preflight of an API call is answered without a
// key, and answers are readable cross-origin with x-next-token exposed.
func TestCORS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("OPTIONS", "/v2/sandboxes", "", "", "Origin", "https://app.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "x-api-key, content-type")
	if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != "*" || r.header.Get("Access-Control-Allow-Headers") != "x-api-key, content-type" {
		t.Fatalf("preflight: %d %v", r.status, r.header)
	}
	r = e.do("GET", "/v2/sandboxes", e.key2, "", "Origin", "https://app.example")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "*" || !strings.Contains(r.header.Get("Access-Control-Expose-Headers"), "X-Next-Token") {
		t.Fatalf("cross-origin list: %d %v", r.status, r.header)
	}
}

// TestSandboxLogsMergeEnvd: a running sandbox's logs carry, besides the
// lifecycle events, what its envd keeps, read by its node (the API never
// dials the sandbox: its address is the node's to reach), in time order,
// with the v2 level filter applied; a paused one is not woken for its
// logs.
func TestSandboxLogsMergeEnvd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dialed := make(chan string, 8)
	envd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dialed <- r.URL.Path
		http.Error(w, "the API dialed the sandbox", http.StatusTeapot)
	}))
	t.Cleanup(envd.Close)
	e.node.Address = envd.Listener.Addr().String()
	e.node.Logs = func(string) []nodeapi.LogEntry {
		now := time.Now().UTC()
		return []nodeapi.LogEntry{
			{Timestamp: now, Level: "info", Message: "server up", Fields: map[string]string{"logger": "start-cmd", "stream": "stdout"}},
			{Timestamp: now.Add(time.Millisecond), Level: "warn", Message: "careful", Fields: map[string]string{"logger": "envd"}},
		}
	}
	sb := e.create(e.key2, client.NewSandbox{})
	r := e.do("GET", "/sandboxes/"+sb.SandboxID+"/logs", e.key2, "")
	var v1 client.SandboxLogs
	if err := json.Unmarshal(r.body, &v1); err != nil || r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var msgs []string
	for _, l := range v1.LogEntries {
		msgs = append(msgs, l.Message)
	}
	if got := strings.Join(msgs, "|"); got != "sandbox created|server up|careful" {
		t.Fatalf("v1 entries %q", got)
	}
	if !strings.Contains(v1.Logs[1].Line, `"stream":"stdout"`) || !strings.Contains(v1.Logs[1].Line, `"message":"server up"`) {
		t.Fatalf("v1 line %q", v1.Logs[1].Line)
	}
	r = e.do("GET", "/v2/sandboxes/"+sb.SandboxID+"/logs?level=warn", e.key2, "")
	var v2 client.SandboxLogsV2
	if err := json.Unmarshal(r.body, &v2); err != nil || len(v2.Logs) != 1 || v2.Logs[0].Message != "careful" {
		t.Fatalf("v2 level=warn: %d %s", r.status, r.body)
	}
	if ok, err := e.client(e.key2).Pause(t.Context(), sb.SandboxID); !ok || err != nil {
		t.Fatal(ok, err)
	}
	r = e.do("GET", "/sandboxes/"+sb.SandboxID+"/logs", e.key2, "")
	if r.status != 200 || strings.Contains(string(r.body), "server up") {
		t.Fatalf("paused: %d %s", r.status, r.body)
	}
	if got, _ := e.client(e.key2).Get(t.Context(), sb.SandboxID); got.State != "paused" {
		t.Fatalf("reading logs woke the sandbox: %s", got.State)
	}
	select {
	case p := <-dialed:
		t.Fatalf("the API dialed the sandbox's address for %s", p)
	default:
	}
}
