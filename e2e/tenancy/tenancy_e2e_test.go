//go:build e2e

// Package tenancye2e checks tenant isolation on a real warren serve with
// runsc: two teams, made through the admin API.
package tenancye2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/pkg/client"
)

// iso names this package's host objects (its own CIDR and veth prefix).
var iso = e2eserve.NewIsolation("tapi", "100.70.0.0/16", "qt")

func TestMain(m *testing.M) { e2eserve.Main(m, iso) }

const (
	apiKey     = "e2b_7461706900000000000000000000000000000001"
	adminToken = "tapi-admin-token-0123456789abcdef"
)

// TestTenancyRunsc: team B cannot reach team A's real sandbox through the
// API, B's template build from an image on the server's own loopback
// port fails on the egress policy, without the server connecting there,
// B uses A's public template without reading its build output, and a
// deleted team's ID is not given again.
func TestTenancyRunsc(t *testing.T) {
	e2eserve.Require(t, os.Geteuid() == 0, "needs root (network namespaces, cgroups, runsc)")
	for _, env := range []string{"WARREN_WARREN", "WARREN_RUNSC", "WARREN_ENVD", "WARREN_TEST_ROOTFS_TAR"} {
		e2eserve.Require(t, e2eserve.Exists(os.Getenv(env)), fmt.Sprintf("$%s (%q) does not exist; run make build base-rootfs", env, os.Getenv(env)))
	}
	s := e2eserve.Start(t, e2eserve.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:3301", APIKey: apiKey, AdminToken: adminToken, Isolation: iso})
	url := s.Env["E2B_API_URL"]
	ctx := context.Background()
	// req sends one request with key (the admin token when key is "")
	// and decodes a JSON answer into out when given.
	req := func(method, path, key, body string, out any) int {
		t.Helper()
		r, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		if key != "" {
			r.Header.Set("X-API-Key", key)
		} else {
			r.Header.Set("X-Admin-Token", adminToken)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			json.NewDecoder(resp.Body).Decode(out)
		}
		return resp.StatusCode
	}
	if st := req("POST", "/admin/teams", apiKey, `{"id":"tapi-x"}`, nil); st != http.StatusForbidden {
		t.Fatalf("POST /admin/teams with a team key: %d, want 403", st)
	}
	var teamB struct {
		APIKey string `json:"apiKey"`
	}
	if st := req("POST", "/admin/teams", "", `{"id":"tapi-b"}`, &teamB); st != http.StatusCreated || !strings.HasPrefix(teamB.APIKey, "e2b_") {
		t.Fatalf("POST /admin/teams: %d %+v", st, teamB)
	}

	a, b := client.New(url, apiKey), client.New(url, teamB.APIKey)
	sb, err := a.Create(ctx, client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatalf("team A's sandbox: %v\n%s", err, s.Logs())
	}
	defer a.Kill(ctx, sb.SandboxID)
	for _, rq := range []struct{ method, path, body string }{
		{"GET", "/sandboxes/" + sb.SandboxID, ""},
		{"DELETE", "/sandboxes/" + sb.SandboxID, ""},
		{"POST", "/sandboxes/" + sb.SandboxID + "/pause", ""},
		{"POST", "/v2/sandboxes/" + sb.SandboxID + "/connect", `{"timeout":60}`},
		{"GET", "/sandboxes/" + sb.SandboxID + "/metrics", ""},
		{"POST", "/sandboxes/" + sb.SandboxID + "/snapshots", `{}`},
	} {
		if st := req(rq.method, rq.path, teamB.APIKey, rq.body, nil); st != http.StatusNotFound {
			t.Errorf("team B %s %s: %d, want 404", rq.method, rq.path, st)
		}
	}
	if list, _, err := b.List(ctx, client.ListOptions{}); err != nil || len(list) != 0 {
		t.Fatalf("team B's list: %+v %v", list, err)
	}

	// fromImage on the server's own port, and on a loopback service that
	// counts its requests: both refused by the egress dialer.
	var hits atomic.Int32
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		http.Error(w, "internal", http.StatusTeapot)
	}))
	defer svc.Close()
	for i, from := range []string{strings.TrimPrefix(url, "http://") + "/admin/x:y", strings.TrimPrefix(svc.URL, "http://") + "/x:y"} {
		tc, err := b.CreateTemplate(ctx, client.NewTemplate{Name: fmt.Sprintf("ssrf-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.StartTemplateBuild(ctx, tc.TemplateID, tc.BuildID, client.TemplateBuild{FromImage: from}); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		_, err = b.WaitTemplateBuild(wctx, tc.TemplateID, tc.BuildID, 200*time.Millisecond, nil)
		cancel()
		var bf *client.BuildFailedError
		if !errors.As(err, &bf) || !strings.Contains(bf.Reason.Message, "egress policy") {
			t.Fatalf("build from %s: %v", from, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the loopback service got %d requests from the server", hits.Load())
	}

	// Team A's sandbox is untouched.
	got, err := a.Get(ctx, sb.SandboxID)
	if err != nil || got.State != "running" {
		t.Fatalf("team A's sandbox after team B's attempts: %+v %v", got, err)
	}

	// A public template is usable, not inspectable: team A's build echoes
	// a marker in a real gVisor build sandbox and is made public; team B
	// creates a sandbox of it but reads none of its build output.
	const marker = "tapi-public-marker-7c2e"
	pub, err := a.CreateTemplate(ctx, client.NewTemplate{Name: "a-public"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.StartTemplateBuild(ctx, pub.TemplateID, pub.BuildID, client.TemplateBuild{FromTemplate: "base",
		Steps: []client.TemplateStep{{Type: "RUN", Args: []string{"echo " + marker}}}}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	_, err = a.WaitTemplateBuild(wctx, pub.TemplateID, pub.BuildID, 200*time.Millisecond, nil)
	cancel()
	if err != nil {
		t.Fatalf("team A's public build: %v\n%s", err, s.Logs())
	}
	if st := req("PATCH", "/v2/templates/"+pub.TemplateID, apiKey, `{"public":true}`, nil); st != http.StatusOK {
		t.Fatalf("publish: %d", st)
	}
	var own struct {
		Logs []struct {
			Message string `json:"message"`
		} `json:"logs"`
	}
	if st := req("GET", "/templates/"+pub.TemplateID+"/builds/"+pub.BuildID+"/logs", apiKey, "", &own); st != http.StatusOK || !strings.Contains(fmt.Sprint(own), marker) {
		t.Fatalf("team A's own build log: %d, without the marker: %v", st, own)
	}
	for _, path := range []string{
		"/templates/" + pub.TemplateID,
		"/templates/" + pub.TemplateID + "/tags",
		"/templates/" + pub.TemplateID + "/builds/" + pub.BuildID + "/status",
		"/templates/" + pub.TemplateID + "/builds/" + pub.BuildID + "/logs",
	} {
		var body any
		if st := req("GET", path, teamB.APIKey, "", &body); st != http.StatusNotFound || strings.Contains(fmt.Sprint(body), marker) {
			t.Errorf("team B GET %s: %d %v, want 404 without the marker", path, st, body)
		}
	}
	sbB, err := b.Create(ctx, client.NewSandbox{TemplateID: "default/a-public"})
	if err != nil {
		t.Fatalf("team B's sandbox of team A's public template: %v", err)
	}
	b.Kill(ctx, sbB.SandboxID)

	// A deleted team's ID is not given again.
	if st := req("POST", "/admin/teams", "", `{"id":"tapi-gone"}`, nil); st != http.StatusCreated {
		t.Fatalf("POST /admin/teams tapi-gone: %d", st)
	}
	if st := req("DELETE", "/admin/teams/tapi-gone", "", "", nil); st != http.StatusNoContent {
		t.Fatalf("DELETE /admin/teams/tapi-gone: %d", st)
	}
	if st := req("POST", "/admin/teams", "", `{"id":"tapi-gone"}`, nil); st != http.StatusConflict {
		t.Fatalf("a new team with a deleted team's ID: %d, want 409", st)
	}
	t.Run("fork tokens", func(t *testing.T) { testForkTokens(t, s, a) })
}

// testForkTokens: each copy of a fork has envd and traffic access tokens
// of its own, so a copy's tokens open neither its source nor its sibling:
// envd answers 401 to another's access token, the proxy 403 to another's
// traffic token.
func testForkTokens(t *testing.T, s *e2eserve.Server, c *client.Client) {
	ctx := context.Background()
	private, count := false, 2
	src, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Network: &client.NetworkConfig{AllowPublicTraffic: &private}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill(ctx, src.SandboxID)
	var forks []client.ForkResult
	if _, _, err := c.Do(ctx, "POST", "/sandboxes/"+src.SandboxID+"/fork", client.ForkRequest{Count: &count}, &forks); err != nil {
		t.Fatalf("fork: %v", err)
	}
	all := []*client.Sandbox{src}
	for _, f := range forks {
		if f.Sandbox == nil {
			t.Fatalf("fork: %+v", f.Error)
		}
		defer c.Kill(ctx, f.Sandbox.SandboxID)
		all = append(all, f.Sandbox)
	}
	seen := map[string]string{}
	for _, sb := range all {
		if sb.EnvdAccessToken == "" || sb.TrafficAccessToken == nil || *sb.TrafficAccessToken == "" {
			t.Fatalf("sandbox %s: envd token %q, traffic token %v", sb.SandboxID, sb.EnvdAccessToken, sb.TrafficAccessToken)
		}
		for _, tok := range []string{sb.EnvdAccessToken, *sb.TrafficAccessToken} {
			if other, dup := seen[tok]; dup {
				t.Errorf("sandboxes %s and %s share a token", other, sb.SandboxID)
			}
			seen[tok] = sb.SandboxID
		}
	}
	call := func(id, port string, header map[string]string) (int, []byte) {
		header["E2b-Sandbox-Id"], header["E2b-Sandbox-Port"] = id, port
		return e2eserve.Call(t, "GET", s.Env["E2B_SANDBOX_URL"]+"/envs", header)
	}
	for _, to := range all {
		for _, from := range all {
			own := to == from
			st, body := call(to.SandboxID, "49983", map[string]string{"X-Access-Token": from.EnvdAccessToken})
			if own && st != http.StatusOK || !own && st != http.StatusUnauthorized {
				t.Errorf("envd of %s with the access token of %s: %d %s", to.SandboxID, from.SandboxID, st, body)
			}
			// Port 8000 has no listener: its own token passes the proxy
			// (502, the port is closed), another's does not (403).
			st, body = call(to.SandboxID, "8000", map[string]string{"E2b-Traffic-Access-Token": *from.TrafficAccessToken})
			if own && st != http.StatusBadGateway || !own && st != http.StatusForbidden {
				t.Errorf("port 8000 of %s with the traffic token of %s: %d %s", to.SandboxID, from.SandboxID, st, body)
			}
		}
	}
}
