package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/envd"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/secrets"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
)

// staticTemplates resolves "base" (and its alias "debian").
type staticTemplates struct{}

func (staticTemplates) Resolve(_ context.Context, _, ref string) (nodeapi.Template, error) {
	switch ref {
	case "base", "debian":
		return nodeapi.Template{ID: "base", BuildID: "b1", User: "user", Workdir: "/home/user"}, nil
	case "small":
		// Built with 1 vCPU, 1 GiB and a 2 GiB disk (below the server's).
		return nodeapi.Template{ID: "small", BuildID: "b2", Resources: sandbox.Resources{VCPUs: 1, MemoryMB: 1024, DiskMB: 2048}}, nil
	case "bigdisk":
		return nodeapi.Template{ID: "bigdisk", BuildID: "b3", Resources: sandbox.Resources{DiskMB: 20480}}, nil
	}
	if name, ok := strings.CutPrefix(ref, "fails-"); ok {
		// A resolver's failure of the class named (errhttp.Name), with a
		// host's detail in its text.
		for _, c := range errdefs.Classes() {
			if errhttp.Name(c) == name {
				return nodeapi.Template{}, fmt.Errorf("template %q: %s: %w", ref, hostError, c)
			}
		}
	}
	return nodeapi.Template{}, fmt.Errorf("template %q: %w", ref, errdefs.ErrNotFound)
}

type env struct {
	t      testing.TB
	srv    *httptest.Server
	st     store.Store
	node   *fakenode.Node
	lc     *lifecycle.Manager
	key1   string // team t1: limit 3 concurrent, 1 h timeout, 2 vCPU
	key2   string // team t2
	keyLow string // team t3: 1 vCPU max (below the default 2)
	// logs holds every line the API server and the lifecycle logged.
	logs *syncBuffer
}

// testSecretsKey is the secrets key of newEnv's server.
var testSecretsKey = []byte("0123456789abcdef0123456789abcdef")

// logger logs at debug level into e.logs.
func (e *env) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

const adminToken = "admin-secret"

// newEnv makes the test server; opts change the lifecycle's
// configuration (its Store and Node are set).
func newEnv(t testing.TB, opts ...func(*lifecycle.Config)) *env {
	t.Helper()
	ctx := context.Background()
	st := storetest.SQLite(t)
	n := fakenode.New()
	logs := &syncBuffer{}
	lcfg := lifecycle.Config{Store: st, Node: n, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for _, o := range opts {
		o(&lcfg)
	}
	lc, err := lifecycle.New(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { lc.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	e := &env{t: t, st: st, node: n, lc: lc, logs: logs}
	for _, tm := range []*store.Team{
		{ID: "t1", Name: "one", Limits: store.Limits{MaxConcurrent: 3, MaxTimeout: time.Hour}},
		{ID: "t2", Name: "two"},
		{ID: "t3", Name: "three", Limits: store.Limits{MaxVCPUs: 1}},
	} {
		if err := st.CreateTeam(ctx, tm); err != nil {
			t.Fatal(err)
		}
	}
	for tid, dst := range map[string]*string{"t1": &e.key1, "t2": &e.key2, "t3": &e.keyLow} {
		k, _, err := apiserver.AddKey(ctx, st, tid, "test", "")
		if err != nil {
			t.Fatal(err)
		}
		*dst = k
	}
	sec, err := secrets.New(st.Secrets(), testSecretsKey)
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{Store: st, Lifecycle: lc, Templates: staticTemplates{}, AdminToken: adminToken, Secrets: sec, Logger: e.logger()})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(conformTo(t, api))
	t.Cleanup(e.srv.Close)
	return e
}

// client is pkg/client for key; conformTo holds its requests to the
// document.
func (e *env) client(key string) *client.Client {
	c := client.New(e.srv.URL, key)
	c.Header.Set(clientHeader, "1")
	return c
}

func (e *env) create(key string, body client.NewSandbox) *client.Sandbox {
	e.t.Helper()
	if body.TemplateID == "" {
		body.TemplateID = "base"
	}
	sb, err := e.client(key).Create(context.Background(), body)
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(method, path, key, body string, hdr ...string) result {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, b}
}

func intp(n int) *int    { return &n }
func boolp(b bool) *bool { return &b }

// TestEndpoints covers every endpoint and every error status of the
// contract. Error bodies must carry code == status.
func TestEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	running := e.create(e.key1, client.NewSandbox{Metadata: map[string]string{"who": "running"}})
	paused := e.create(e.key1, client.NewSandbox{AutoResume: &client.AutoResume{Enabled: true}})
	if ok, err := e.client(e.key1).Pause(context.Background(), paused.SandboxID); !ok || err != nil {
		t.Fatalf("pause: %t %v", ok, err)
	}
	other := e.create(e.key2, client.NewSandbox{})
	sub := func(p string) string {
		p = strings.ReplaceAll(p, "{run}", running.SandboxID)
		p = strings.ReplaceAll(p, "{paused}", paused.SandboxID)
		return strings.ReplaceAll(p, "{other}", other.SandboxID)
	}
	tests := []struct {
		name, method, path, body string
		key                      string // "" → key1; "-" → none
		hdr                      []string
		want                     int
		contains                 string
	}{
		{"health", "GET", "/health", "", "-", nil, 204, ""},
		{"no key", "GET", "/v2/sandboxes", "", "-", nil, 401, "missing API key"},
		{"bad key", "GET", "/v2/sandboxes", "", "e2b_0000000000000000000000000000000000000000", nil, 401, "invalid API key"},
		{"bad admin token", "GET", "/v2/sandboxes", "", "-", []string{"X-Admin-Token", "nope"}, 401, "invalid admin token"},
		{"admin route needs admin", "GET", "/admin/sandboxes/running-counts", "", "", nil, 403, "admin token"},
		{"unknown route", "GET", "/nope", "", "", nil, 404, "no route"},
		{"teams", "GET", "/teams", "", "", nil, 200, `"teamID":"t1"`},

		{"create v1", "POST", "/sandboxes", `{"templateID":"base","timeout":30,"secure":true,"unknownField":1}`, "", nil, 201, `"envdAccessToken"`},
		{"create v2 by alias", "POST", "/v2/sandboxes", `{"templateID":"debian"}`, "t2", nil, 201, `"alias":"debian"`},
		{"create no body", "POST", "/v2/sandboxes", "", "", nil, 400, "body is required"},
		{"create bad json", "POST", "/v2/sandboxes", `{`, "", nil, 400, "invalid JSON"},
		{"create no template", "POST", "/v2/sandboxes", `{}`, "", nil, 400, "'templateID'"},
		{"create unknown template", "POST", "/v2/sandboxes", `{"templateID":"nope"}`, "", nil, 404, "template 'nope' not found"},
		{"create wrong type", "POST", "/v2/sandboxes", `{"templateID":"base","timeout":"x"}`, "", nil, 400, "'timeout'"},
		{"create metadata not string", "POST", "/v2/sandboxes", `{"templateID":"base","metadata":{"a":1}}`, "", nil, 400, "'metadata"}, // Go 1.27 names the key too ('metadata.a')
		{"create negative timeout", "POST", "/v2/sandboxes", `{"templateID":"base","timeout":-1}`, "", nil, 400, "'timeout'"},
		{"create timeout over max", "POST", "/v2/sandboxes", `{"templateID":"base","timeout":3601}`, "", nil, 400, "Timeout cannot be greater than 1 hours"},
		{"create bad cidr", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"allowOut":["exa mple.com"]}}`, "", nil, 400, "'network.allowOut[0]'"},
		{"create domain in denyOut", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"denyOut":["example.com"]}}`, "", nil, 400, "'network.denyOut[0]'"},
		{"create autoresume without memory", "POST", "/v2/sandboxes", `{"templateID":"base","autoResume":{"enabled":true},"autoPauseMemory":false}`, "", nil, 400, "'autoResume'"},
		{"create over cpu bound", "POST", "/v2/sandboxes", `{"templateID":"base"}`, "low", nil, 400, "cpuCount 2 exceeds"},
		{"create of a 1 vCPU template within the bound", "POST", "/v2/sandboxes", `{"templateID":"small"}`, "low", nil, 201, ""},
		{"admin create needs team", "POST", "/v2/sandboxes", `{"templateID":"base"}`, "-", []string{"X-Admin-Token", adminToken}, 400, "X-Team-ID"},

		{"list v1", "GET", "/sandboxes", "", "", nil, 200, "{run}"},
		{"list v2 bad state", "GET", "/v2/sandboxes?state=dead", "", "", nil, 400, "'state'"},
		{"list v2 bad limit", "GET", "/v2/sandboxes?limit=0", "", "", nil, 400, "'limit'"},
		{"list v2 bad order", "GET", "/v2/sandboxes?order=up", "", "", nil, 400, "'order'"},
		{"list v2 bad startedAfter", "GET", "/v2/sandboxes?startedAfter=yesterday", "", "", nil, 400, "'startedAfter'"},
		{"list v2 bad token", "GET", "/v2/sandboxes?nextToken=garbage", "", "", nil, 400, "'nextToken'"},

		{"get", "GET", "/sandboxes/{run}", "", "", nil, 200, `"state":"running"`},
		{"get paused", "GET", "/sandboxes/{paused}", "", "", nil, 200, `"state":"paused"`},
		{"get other team", "GET", "/sandboxes/{other}", "", "", nil, 404, "doesn't exist"},
		{"get admin any team", "GET", "/sandboxes/{other}", "", "-", []string{"X-Admin-Token", adminToken}, 200, "{other}"},
		{"get missing", "GET", "/sandboxes/nope", "", "", nil, 404, ""},

		{"timeout", "POST", "/sandboxes/{run}/timeout", `{"timeout":600}`, "", nil, 204, ""},
		{"timeout missing field", "POST", "/sandboxes/{run}/timeout", `{}`, "", nil, 400, "'timeout'"},
		{"timeout over max", "POST", "/sandboxes/{run}/timeout", `{"timeout":7200}`, "", nil, 400, "Timeout cannot be greater"},
		{"timeout missing sandbox", "POST", "/sandboxes/nope/timeout", `{"timeout":5}`, "", nil, 404, ""},
		{"refresh", "POST", "/sandboxes/{run}/refreshes", `{"duration":30}`, "", nil, 204, ""},
		{"refresh no body", "POST", "/sandboxes/{run}/refreshes", ``, "", nil, 204, ""},
		{"refresh too long", "POST", "/sandboxes/{run}/refreshes", `{"duration":3601}`, "", nil, 400, "'duration'"},
		{"refresh missing", "POST", "/sandboxes/nope/refreshes", `{}`, "", nil, 404, ""},

		{"pause already paused", "POST", "/sandboxes/{paused}/pause", `{}`, "", nil, 409, "already paused"},
		{"pause missing", "POST", "/sandboxes/nope/pause", ``, "", nil, 404, ""},
		{"resume running", "POST", "/sandboxes/{run}/resume", `{"timeout":60}`, "", nil, 409, "already running"},
		{"resume missing", "POST", "/sandboxes/nope/resume", `{}`, "", nil, 404, ""},
		{"connect v1 needs timeout", "POST", "/sandboxes/{run}/connect", `{}`, "", nil, 400, "'timeout'"},
		{"connect v1 running", "POST", "/sandboxes/{run}/connect", `{"timeout":60}`, "", nil, 200, "{run}"},
		{"connect v2 running", "POST", "/v2/sandboxes/{run}/connect", ``, "", nil, 200, "{run}"},
		{"connect v2 missing", "POST", "/v2/sandboxes/nope/connect", `{"timeout":5}`, "", nil, 404, ""},
		{"connect over max", "POST", "/v2/sandboxes/{run}/connect", `{"timeout":99999}`, "", nil, 400, "Timeout cannot be greater"},

		{"metrics", "GET", "/sandboxes/{run}/metrics", "", "", nil, 200, `"cpuUsedPct"`},
		{"metrics paused empty", "GET", "/sandboxes/{paused}/metrics", "", "", nil, 200, `[]`},
		{"metrics bad start", "GET", "/sandboxes/{run}/metrics?start=x", "", "", nil, 400, "'start'"},
		{"metrics end before start", "GET", "/sandboxes/{run}/metrics?start=10&end=5", "", "", nil, 400, "'end'"},
		{"metrics missing", "GET", "/sandboxes/nope/metrics", "", "", nil, 404, ""},
		{"batch metrics", "GET", "/sandboxes/metrics?sandbox_ids={run},{other},nope", "", "", nil, 200, `"{run}":{`},
		{"batch metrics needs ids", "GET", "/sandboxes/metrics", "", "", nil, 400, "'sandbox_ids'"},
		{"logs v1", "GET", "/sandboxes/{run}/logs", "", "", nil, 200, `"sandbox created"`},
		{"logs v1 missing", "GET", "/sandboxes/nope/logs", "", "", nil, 404, ""},
		{"logs v2", "GET", "/v2/sandboxes/{run}/logs?direction=backward", "", "", nil, 200, `"logs":[{`},
		{"logs v2 bad level", "GET", "/v2/sandboxes/{run}/logs?level=loud", "", "", nil, 400, "'level'"},
		{"logs v2 other team", "GET", "/v2/sandboxes/{other}/logs", "", "", nil, 404, ""},

		{"network", "PUT", "/sandboxes/{run}/network", `{"allowOut":["8.8.8.8"],"denyOut":["10.0.0.0/8"],"allow_internet_access":false}`, "", nil, 204, ""},
		{"network bad cidr", "PUT", "/sandboxes/{run}/network", `{"denyOut":["nope"]}`, "", nil, 400, "'denyOut[0]'"},
		{"network paused", "PUT", "/sandboxes/{paused}/network", `{}`, "", nil, 409, "not running"},
		{"network missing", "PUT", "/sandboxes/nope/network", `{}`, "", nil, 404, ""},

		{"fork bad count", "POST", "/sandboxes/{run}/fork", `{"count":0}`, "", nil, 400, "'count'"},
		{"fork paused", "POST", "/sandboxes/{paused}/fork", `{}`, "", nil, 409, ""},
		{"fork missing", "POST", "/sandboxes/nope/fork", `{}`, "", nil, 404, ""},
		{"snapshot", "POST", "/sandboxes/{run}/snapshots", `{}`, "", nil, 501, "not supported"},
		{"snapshot missing", "POST", "/sandboxes/nope/snapshots", `{}`, "", nil, 404, ""},
		{"list snapshots", "GET", "/snapshots", "", "", nil, 200, "[]"},

		{"admin running counts", "GET", "/admin/sandboxes/running-counts", "", "-", []string{"X-Admin-Token", adminToken}, 200, `"t2":`},
		{"kill other team", "DELETE", "/sandboxes/{other}", "", "", nil, 404, ""},
		{"kill missing", "DELETE", "/sandboxes/nope", "", "", nil, 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := e.key1
			switch tc.key {
			case "-":
				key = ""
			case "t2":
				key = e.key2
			case "low":
				key = e.keyLow
			case "":
			default:
				key = tc.key
			}
			res := e.do(tc.method, sub(tc.path), key, tc.body, tc.hdr...)
			if res.status != tc.want {
				t.Fatalf("%s %s: status %d, want %d; body %s", tc.method, tc.path, res.status, tc.want, res.body)
			}
			if !strings.Contains(string(res.body), sub(tc.contains)) {
				t.Fatalf("body %s does not contain %q", res.body, sub(tc.contains))
			}
			switch {
			case res.status == 204:
				if len(res.body) != 0 {
					t.Fatalf("204 with a body: %q", res.body)
				}
			case res.status >= 400:
				var eb client.Error
				if err := json.Unmarshal(res.body, &eb); err != nil || eb.Code != res.status || eb.Message == "" {
					t.Fatalf("error body %s: want {code:%d, message}", res.body, res.status)
				}
				if res.status < 500 && eb.Message == errhttp.Message(errdefs.Class(errhttp.ClassOf(res.status, res.header))) {
					t.Fatalf("a %d with its class's words only (%q): the error was made without a message for its client", res.status, eb.Message)
				}
				checkClientMessage(t, eb.Message)
			}
		})
	}
}

// checkClientMessage fails if msg, an error body's message, carries an
// error's text: the words of a class wrapped into it (": not found",
// ": invalid argument"), a host's detail (hostError's), a second line.
func checkClientMessage(t *testing.T, msg string) {
	t.Helper()
	for _, c := range errdefs.Classes() {
		if strings.Contains(msg, ": "+c.Error()) {
			t.Fatalf("error message %q carries the words of class %q: it was cut out of an error's text", msg, c)
		}
	}
	for _, leak := range []string{"wstr", "exit status", "permission denied", "gofer", "\n", "%!"} {
		if strings.Contains(msg, leak) {
			t.Fatalf("error message %q carries an internal error's text (%q)", msg, leak)
		}
	}
}

func TestKillConnectPauseFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c := e.client(e.key1)
	sb := e.create(e.key1, client.NewSandbox{Timeout: intp(60), AutoPause: boolp(true)})
	if sb.EnvdVersion != envd.Version || sb.EnvdAccessToken == "" || sb.Domain != nil {
		t.Fatalf("create answer %+v", sb)
	}
	if ok, err := c.Pause(ctx, sb.SandboxID); !ok || err != nil {
		t.Fatalf("pause: %t %v", ok, err)
	}
	if ok, err := c.Pause(ctx, sb.SandboxID); ok || err != nil {
		t.Fatalf("second pause: %t %v, want false nil", ok, err)
	}
	if _, resumed, err := c.Connect(ctx, sb.SandboxID, 30); !resumed || err != nil {
		t.Fatalf("connect paused: resumed %t %v", resumed, err)
	}
	if _, resumed, err := c.Connect(ctx, sb.SandboxID, 30); resumed || err != nil {
		t.Fatalf("connect running: resumed %t %v", resumed, err)
	}
	// connect only extends: the end stays ~60 s? No: resume set it to now+30.
	d, _ := c.Get(ctx, sb.SandboxID)
	if left := time.Until(d.EndAt); left < 20*time.Second || left > 31*time.Second {
		t.Fatalf("end in %v after connect(30)", left)
	}
	if d.Lifecycle == nil || d.Lifecycle.OnTimeout != "pause" {
		t.Fatalf("lifecycle %+v", d.Lifecycle)
	}
	if ok, err := c.Kill(ctx, sb.SandboxID); !ok || err != nil {
		t.Fatalf("kill: %t %v", ok, err)
	}
	if ok, err := c.Kill(ctx, sb.SandboxID); ok || err != nil {
		t.Fatalf("second kill: %t %v, want false nil", ok, err)
	}
	list, _, err := c.List(ctx, client.ListOptions{})
	if err != nil || len(list) != 0 {
		t.Fatalf("killed sandbox still listed: %v %v", list, err)
	}
	// v1 resume of a paused sandbox answers 201.
	sb2 := e.create(e.key1, client.NewSandbox{})
	c.Pause(ctx, sb2.SandboxID)
	res := e.do("POST", "/sandboxes/"+sb2.SandboxID+"/resume", e.key1, `{"timeout":60}`)
	if res.status != 201 {
		t.Fatalf("resume: %d %s", res.status, res.body)
	}
}

func TestConcurrencyLimit429(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for range 3 {
		e.create(e.key1, client.NewSandbox{})
	}
	res := e.do("POST", "/v2/sandboxes", e.key1, `{"templateID":"base"}`)
	if res.status != 429 || res.header.Get("Retry-After") == "" {
		t.Fatalf("4th create: %d Retry-After %q body %s", res.status, res.header.Get("Retry-After"), res.body)
	}
	if !strings.Contains(string(res.body), `"code":429`) || !strings.Contains(string(res.body), "maximum number of concurrent sandboxes (3)") {
		t.Fatalf("429 body %s", res.body)
	}
	// Another team is not affected.
	e.create(e.key2, client.NewSandbox{})
}

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c := e.client(e.key2)
	want := map[string]bool{}
	for i := range 5 {
		md := map[string]string{"sandboxTestId": "test-abc", "key one": fmt.Sprintf("v&%d=x", i%2)}
		sb := e.create(e.key2, client.NewSandbox{Metadata: md})
		if i%2 == 0 {
			want[sb.SandboxID] = true
		}
	}
	e.create(e.key2, client.NewSandbox{Metadata: map[string]string{"sandboxTestId": "other"}})

	// The exact wire form of the JS SDK for {'key one': 'v&0=x', sandboxTestId: 'test-abc'}.
	raw := "metadata=key%252520one%3Dv%2525260%25253Dx%26sandboxTestId%3Dtest-abc"
	res := e.do("GET", "/v2/sandboxes?"+raw, e.key2, "")
	var got []client.ListedSandbox
	if err := json.Unmarshal(res.body, &got); err != nil || res.status != 200 {
		t.Fatalf("list: %d %s", res.status, res.body)
	}
	if len(got) != len(want) {
		t.Fatalf("metadata filter matched %d, want %d: %s", len(got), len(want), res.body)
	}
	for _, sb := range got {
		if !want[sb.SandboxID] {
			t.Fatalf("unexpected %s", sb.SandboxID)
		}
	}
	// Pagination: 6 sandboxes, pages of 4 then 2, newest first, no overlap.
	seen := map[string]bool{}
	page, next, err := c.List(ctx, client.ListOptions{Limit: 4})
	if err != nil || len(page) != 4 || next == "" {
		t.Fatalf("page 1: %d items, next %q, %v", len(page), next, err)
	}
	for i := 1; i < len(page); i++ {
		if page[i].StartedAt.After(page[i-1].StartedAt) {
			t.Fatal("page not ordered newest first")
		}
	}
	for _, sb := range page {
		seen[sb.SandboxID] = true
	}
	page, next, err = c.List(ctx, client.ListOptions{Limit: 4, NextToken: next})
	if err != nil || len(page) != 2 || next != "" {
		t.Fatalf("page 2: %d items, next %q, %v", len(page), next, err)
	}
	for _, sb := range page {
		if seen[sb.SandboxID] {
			t.Fatalf("%s on both pages", sb.SandboxID)
		}
	}
	// State filter.
	if ok, _ := c.Pause(ctx, page[0].SandboxID); !ok {
		t.Fatal("pause failed")
	}
	paused, _, _ := c.List(ctx, client.ListOptions{State: []string{"paused"}})
	if len(paused) != 1 || paused[0].SandboxID != page[0].SandboxID || paused[0].State != "paused" {
		t.Fatalf("paused list %+v", paused)
	}
	res = e.do("GET", "/v2/sandboxes?state=running,paused&order=asc&template=debian", e.key2, "")
	if json.Unmarshal(res.body, &got); len(got) != 6 || res.header.Get("X-Total-Running") != "5" {
		t.Fatalf("all states asc: %d items, X-Total-Running %q", len(got), res.header.Get("X-Total-Running"))
	}
}

func TestMetadataFilterDecoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		query string
		want  map[string]string
	}{
		{"metadata=key%252520one%3Dv%2525261%25253Dx%26sandboxTestId%3Dtest-abc", map[string]string{"key one": "v&1=x", "sandboxTestId": "test-abc"}},
		{"metadata=a%3Db", map[string]string{"a": "b"}},
		{"", nil},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.query)
			got, err := apiserver.ParseMetadataFilter(q.Get("metadata"))
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("got %v %v, want %v", got, err, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
	if _, err := apiserver.ParseMetadataFilter("novalue"); err == nil {
		t.Fatal("pair without = accepted")
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	seed := "e2b_" + strings.Repeat("ab", 20)
	added, err := apiserver.EnsureDefaultTeam(ctx, st, seed)
	if err != nil || !added {
		t.Fatalf("first ensure: %t %v", added, err)
	}
	if added, err = apiserver.EnsureDefaultTeam(ctx, st, seed); err != nil || added {
		t.Fatalf("second ensure: %t %v", added, err)
	}
	k, err := st.APIKeyByHash(ctx, apiserver.HashKey(seed))
	if err != nil || k.TeamID != apiserver.DefaultTeamID || strings.Contains(k.Hash, seed) || k.Mask != "e2b_abab…abab" {
		t.Fatalf("stored key %+v %v", k, err)
	}
	if _, _, err := apiserver.AddKey(ctx, st, apiserver.DefaultTeamID, "x", "e2b_short"); !errdefs.IsInvalid(err) {
		t.Fatalf("short key: %v", err)
	}
	key := apiserver.NewKey()
	if !apiserver.ValidKey(key) {
		t.Fatalf("NewKey %q invalid", key)
	}
}

func TestForkAndAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	src := e.create(e.key2, client.NewSandbox{Metadata: map[string]string{"m": "1"}})
	res := e.do("POST", "/sandboxes/"+src.SandboxID+"/fork", e.key2, `{"count":2,"timeout":60}`)
	var forks []client.ForkResult
	if err := json.Unmarshal(res.body, &forks); err != nil || res.status != 201 || len(forks) != 2 {
		t.Fatalf("fork: %d %s", res.status, res.body)
	}
	for _, f := range forks {
		if f.Sandbox == nil || f.Error != nil || f.Sandbox.SandboxID == src.SandboxID || f.Sandbox.EnvdVersion == "" {
			t.Fatalf("fork result %+v", f)
		}
		d, err := e.client(e.key2).Get(ctx, f.Sandbox.SandboxID)
		if err != nil || d.Metadata["m"] != "1" || d.State != "running" {
			t.Fatalf("forked sandbox %+v %v", d, err)
		}
	}
	// Forks count towards the limit: t1 allows 3.
	src1 := e.create(e.key1, client.NewSandbox{})
	res = e.do("POST", "/sandboxes/"+src1.SandboxID+"/fork", e.key1, `{"count":3}`)
	if err := json.Unmarshal(res.body, &forks); err != nil || res.status != 201 || len(forks) != 3 {
		t.Fatalf("fork over limit: %d %s", res.status, res.body)
	}
	if forks[0].Sandbox == nil || forks[1].Sandbox == nil || forks[2].Error == nil || forks[2].Error.Code != 429 {
		t.Fatalf("fork over limit results %s", res.body)
	}

	admin := []string{"X-Admin-Token", adminToken}
	res = e.do("POST", "/admin/teams/t2/api-keys", "", `{"name":"ops"}`, admin...)
	var created struct {
		ID, Key string
		Mask    struct {
			Prefix                               string
			ValueLength                          int
			MaskedValuePrefix, MaskedValueSuffix string
		}
	}
	if json.Unmarshal(res.body, &created); res.status != 201 || !apiserver.ValidKey(created.Key) {
		t.Fatalf("admin create key: %d %s", res.status, res.body)
	}
	if m := created.Mask; m.Prefix != "e2b_" || m.ValueLength != 40 || m.MaskedValuePrefix != created.Key[4:6] || m.MaskedValueSuffix != created.Key[40:] {
		t.Fatalf("admin create key mask: %s", res.body)
	}
	if _, _, err := e.client(created.Key).List(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("new key: %v", err)
	}
	if res = e.do("DELETE", "/admin/teams/t2/api-keys/"+created.ID, "", "", admin...); res.status != 204 {
		t.Fatalf("admin delete key: %d %s", res.status, res.body)
	}
	if _, _, err := e.client(created.Key).List(ctx, client.ListOptions{}); err == nil {
		t.Fatal("revoked key still works")
	}
	res = e.do("POST", "/admin/teams/t2/sandboxes/kill", "", "", admin...)
	if res.status != 200 || !strings.Contains(string(res.body), `"killedCount":3`) {
		t.Fatalf("admin kill team: %d %s", res.status, res.body)
	}
	if list, _, _ := e.client(e.key2).List(ctx, client.ListOptions{}); len(list) != 0 {
		t.Fatalf("team t2 still has %d sandboxes", len(list))
	}
	evs, _ := e.st.ListEvents(ctx, src.SandboxID)
	if last := evs[len(evs)-1]; last.Reason != "admin" {
		t.Fatalf("admin kill reason %q", last.Reason)
	}
	// Admin acting as a team creates in that team.
	res = e.do("POST", "/v2/sandboxes", "", `{"templateID":"base"}`, "X-Admin-Token", adminToken, "X-Team-ID", "t2")
	if res.status != 201 {
		t.Fatalf("admin create as t2: %d %s", res.status, res.body)
	}
	if res = e.do("GET", "/v2/sandboxes", "", "", "X-Admin-Token", adminToken, "X-Team-ID", "nope"); res.status != 400 {
		t.Fatalf("admin unknown team: %d %s", res.status, res.body)
	}
}

// TestSandboxSizedByTemplate: a sandbox gets the CPU and memory its
// template was built with, and a disk no smaller than the server's.
func TestSandboxSizedByTemplate(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		template string
		cpu      int
		memMB    int64
		diskMB   int64
	}{
		{"base", 2, 512, 10240},
		{"small", 1, 1024, 10240},
		{"bigdisk", 2, 512, 20480},
	} {
		t.Run(tc.template, func(t *testing.T) {
			sb := e.create(e.key2, client.NewSandbox{TemplateID: tc.template})
			d, err := e.client(e.key2).Get(ctx, sb.SandboxID)
			if err != nil {
				t.Fatal(err)
			}
			if d.CPUCount != tc.cpu || d.MemoryMB != tc.memMB || d.DiskSizeMB != tc.diskMB {
				t.Errorf("sandbox of %s: %d vCPU, %d MiB, disk %d MiB; want %d, %d, %d",
					tc.template, d.CPUCount, d.MemoryMB, d.DiskSizeMB, tc.cpu, tc.memMB, tc.diskMB)
			}
		})
	}
}

// TestNetworkUpdateKeepsInternet: an update without allowInternetAccess
// keeps the sandbox's setting; it never turns internet access on. Both
// spellings of the field are taken.
func TestNetworkUpdateKeepsInternet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	sb := e.create(e.key1, client.NewSandbox{AllowInternetAccess: boolp(false)})
	internet := func() bool {
		t.Helper()
		ns, err := e.node.Get(ctx, sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		return ns.Network.Internet
	}
	if internet() {
		t.Fatal("created with allowInternetAccess=false, has internet")
	}
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"allowOut":["8.8.8.8"]}`, false},
		{`{}`, false},
		{`{"allowInternetAccess":true}`, true},
		{`{"denyOut":["10.0.0.0/8"]}`, true},
		{`{"allow_internet_access":false}`, false},
		{`{"allowOut":[]}`, false},
	} {
		if r := e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", e.key1, tc.body); r.status != 204 {
			t.Fatalf("PUT %s: %d %s", tc.body, r.status, r.body)
		}
		if got := internet(); got != tc.want {
			t.Fatalf("after PUT %s: internet %t, want %t", tc.body, got, tc.want)
		}
	}
	info, err := e.client(e.key1).Get(ctx, sb.SandboxID)
	if err != nil || info.AllowInternetAccess == nil || *info.AllowInternetAccess {
		t.Fatalf("getInfo allowInternetAccess = %v, %v", info.AllowInternetAccess, err)
	}
}
