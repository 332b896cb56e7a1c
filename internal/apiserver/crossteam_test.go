package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestCrossTeam is the tenancy attack suite: two teams made through the
// admin API; team B, with an ordinary key, tries every endpoint on team
// A's sandboxes, templates, builds, snapshots, webhooks and events. Each
// answers 404 (B cannot tell A's objects from missing ones), lists leave
// them out, its guesses at the admin token and keys are throttled on its
// own address only, and afterwards A's objects are untouched. (Signed
// /files URLs: internal/envd/files, internal/proxy, e2e/tenancy.)
func TestCrossTeam(t *testing.T) {
	const marker = "a-marker-5e1f"
	e := newTemplateEnv(t)
	e.api.MountEvents(apiserver.EventsConfig{})
	ctx := context.Background()
	base, err := e.local.Catalog.Resolve(ctx, "t1", "base")
	if err != nil {
		t.Fatal(err)
	}
	e.snaps.base = base
	a := e.adminTeam("tapi-a", "")
	b := e.adminTeam("tapi-b", "")

	// Team A's objects.
	running := e.create(a.APIKey, client.NewSandbox{TemplateID: "base", Metadata: map[string]string{"owner": "a"}})
	paused := e.create(a.APIKey, client.NewSandbox{TemplateID: "base", AutoResume: &client.AutoResume{Enabled: true}})
	expect(t, "pause", e.do("POST", "/sandboxes/"+paused.SandboxID+"/pause", a.APIKey, ""), http.StatusNoContent)
	tpl := e.createTemplate(a.APIKey, `{"name":"a-private"}`)
	expect(t, "start build", e.do("POST", "/v2/templates/"+tpl.TemplateID+"/builds/"+tpl.BuildID, a.APIKey,
		`{"fromTemplate":"base","steps":[{"type":"RUN","args":["true"]}]}`), http.StatusAccepted)
	if bi := e.waitBuild(a.APIKey, tpl.TemplateID, tpl.BuildID); bi.Status != "ready" {
		t.Fatalf("team A's build: %+v", bi)
	}
	r := e.do("POST", "/sandboxes/"+running.SandboxID+"/snapshots", a.APIKey, `{"name":"a-snap"}`)
	expect(t, "snapshot", r, http.StatusCreated)
	var snap snapshotInfo
	decodeJSON(t, r, &snap)
	r = e.do("POST", "/events/webhooks", a.APIKey, `{"name":"a","url":"https://example.invalid/hook","signatureSecret":"a-secret-123"}`)
	expect(t, "webhook", r, http.StatusCreated)
	var hook struct {
		ID string `json:"id"`
	}
	decodeJSON(t, r, &hook)
	snapTemplate, _, _ := strings.Cut(snap.SnapshotID, ":")
	// A public template whose build echoed a marker: usable by B, not
	// inspectable (its builds, status, logs, tags and uploads are A's).
	pub := e.createTemplate(a.APIKey, `{"name":"a-public"}`)
	expect(t, "start public build", e.do("POST", "/v2/templates/"+pub.TemplateID+"/builds/"+pub.BuildID, a.APIKey,
		`{"fromTemplate":"base","steps":[{"type":"ENV","args":["A_ENV","`+marker+`-env"]},{"type":"RUN","args":["echo `+marker+`-run"]}]}`), http.StatusAccepted)
	if bi := e.waitBuild(a.APIKey, pub.TemplateID, pub.BuildID); bi.Status != "ready" {
		t.Fatalf("team A's public build: %+v", bi)
	}
	expect(t, "publish", e.do("PATCH", "/v2/templates/"+pub.TemplateID, a.APIKey, `{"public":true}`), http.StatusOK)
	if r := e.do("GET", "/templates/"+pub.TemplateID+"/builds/"+pub.BuildID+"/logs", a.APIKey, ""); !strings.Contains(string(r.body), marker) {
		t.Fatalf("A's own build log lacks the marker: %d %s", r.status, r.body)
	}

	sub := strings.NewReplacer("{run}", running.SandboxID, "{paused}", paused.SandboxID, "{tpl}", tpl.TemplateID,
		"{build}", tpl.BuildID, "{snap}", snapTemplate, "{hook}", hook.ID, "{pub}", pub.TemplateID, "{pubBuild}", pub.BuildID)
	notFound := []struct{ method, path, body string }{
		{"GET", "/sandboxes/{run}", ""},
		{"GET", "/sandboxes/{paused}", ""},
		{"DELETE", "/sandboxes/{run}", ""},
		{"POST", "/sandboxes/{run}/timeout", `{"timeout":1}`},
		{"POST", "/sandboxes/{run}/refreshes", `{"duration":10}`},
		{"POST", "/sandboxes/{run}/pause", ""},
		{"POST", "/sandboxes/{paused}/resume", `{"timeout":60}`},
		{"POST", "/sandboxes/{paused}/connect", `{"timeout":60}`},
		{"POST", "/v2/sandboxes/{paused}/connect", `{"timeout":60}`},
		{"POST", "/v2/sandboxes/{run}/connect", `{"timeout":60}`},
		{"GET", "/sandboxes/{run}/metrics", ""},
		{"GET", "/sandboxes/{run}/logs", ""},
		{"GET", "/v2/sandboxes/{run}/logs", ""},
		{"POST", "/sandboxes/{run}/fork", `{"count":1}`},
		{"PUT", "/sandboxes/{run}/network", `{"allowOut":["1.1.1.1"]}`},
		{"POST", "/sandboxes/{run}/snapshots", `{"name":"stolen"}`},
		{"POST", "/v2/sandboxes", `{"templateID":"{tpl}"}`},
		{"POST", "/v2/sandboxes", `{"templateID":"a-private"}`},
		{"POST", "/v2/sandboxes", `{"templateID":"tapi-a/a-private"}`},
		{"POST", "/v2/sandboxes", `{"templateID":"{snap}"}`},
		{"POST", "/v2/sandboxes", `{"templateID":"a-snap"}`},
		{"GET", "/templates/{tpl}", ""},
		{"GET", "/templates/a-private", ""},
		{"GET", "/templates/aliases/a-private", ""},
		{"GET", "/templates/aliases/tapi-a%2Fa-private", ""},
		{"GET", "/templates/{tpl}/tags", ""},
		{"DELETE", "/templates/{tpl}", ""},
		{"DELETE", "/templates/{snap}", ""},
		{"PATCH", "/v2/templates/{tpl}", `{"public":true}`},
		{"POST", "/templates/tags", `{"target":"{tpl}:default","tags":["mine"]}`},
		{"DELETE", "/templates/tags", `{"name":"{tpl}","tags":["default"]}`},
		{"GET", "/templates/{tpl}/builds/{build}/status", ""},
		{"GET", "/templates/{tpl}/builds/{build}/logs", ""},
		{"POST", "/v2/templates/{tpl}/builds/{build}", `{"fromTemplate":"base"}`},
		{"GET", "/templates/{tpl}/files/0000000000000000000000000000000000000000000000000000000000000000", ""},
		{"GET", "/events/sandboxes/{run}", ""},
		{"GET", "/events/webhooks/{hook}", ""},
		{"PATCH", "/events/webhooks/{hook}", `{"url":"https://evil.invalid/"}`},
		{"DELETE", "/events/webhooks/{hook}", ""},
		{"GET", "/events/webhooks/{hook}/deliveries", ""},
		{"POST", "/events/webhooks/{hook}/deliveries/x/redeliver", ""},
		// A's public template: everything but using it.
		{"GET", "/templates/{pub}", ""},
		{"GET", "/templates/tapi-a%2Fa-public", ""},
		{"GET", "/templates/{pub}/tags", ""},
		{"GET", "/templates/{pub}/builds/{pubBuild}/status", ""},
		{"GET", "/templates/{pub}/builds/{pubBuild}/status?logsOffset=0&level=debug", ""},
		{"GET", "/templates/{pub}/builds/{pubBuild}/logs", ""},
		{"GET", "/templates/{pub}/builds/{pubBuild}/logs?direction=backward", ""},
		{"GET", "/templates/{pub}/files/0000000000000000000000000000000000000000000000000000000000000000", ""},
		{"POST", "/v2/templates/{pub}/builds/{pubBuild}", `{"fromTemplate":"base"}`},
		{"DELETE", "/templates/{pub}", ""},
		{"PATCH", "/v2/templates/{pub}", `{"public":false}`},
		{"POST", "/templates/tags", `{"target":"{pub}:default","tags":["mine"]}`},
		{"DELETE", "/templates/tags", `{"name":"{pub}","tags":["default"]}`},
	}
	for _, rq := range notFound {
		path, body := sub.Replace(rq.path), sub.Replace(rq.body)
		t.Run(rq.method+" "+rq.path+" "+rq.body, func(t *testing.T) {
			r := e.do(rq.method, path, b.APIKey, body)
			expect(t, rq.method+" "+path, r, http.StatusNotFound)
			for _, secret := range []string{running.SandboxID + `"`, "a-secret", `"owner"`, marker, pub.BuildID} {
				if strings.Contains(string(r.body), secret) && !strings.Contains(path, strings.Trim(secret, `"`)) {
					t.Errorf("answer shows %s: %s", secret, r.body)
				}
			}
		})
	}

	// Lists and batch reads leave A's objects out.
	for _, path := range []string{"/sandboxes", "/v2/sandboxes", "/v2/sandboxes?state=paused", "/sandboxes/metrics?sandbox_ids={run},{paused}",
		"/templates", "/v2/templates", "/snapshots", "/snapshots?sandboxID={run}", "/events/sandboxes", "/events/webhooks", "/teams"} {
		path = sub.Replace(path)
		r := e.do("GET", path, b.APIKey, "")
		if r.status != http.StatusOK && r.status != http.StatusNotFound {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
		for _, id := range []string{running.SandboxID, paused.SandboxID, tpl.TemplateID, snapTemplate, hook.ID, "tapi-a", "a-private", "a-snap", pub.TemplateID, marker} {
			if strings.Contains(string(r.body), id) {
				t.Errorf("GET %s as team B shows %s: %s", path, id, r.body)
			}
		}
	}
	// What B may do with A's public template: resolve its name (to its ID
	// and public flag, nothing else), create sandboxes of it by ID and
	// as team/name, and build from it.
	r = e.do("GET", "/templates/aliases/tapi-a%2Fa-public", b.APIKey, "")
	expect(t, "alias of A's public template", r, http.StatusOK)
	if want := `{"templateID":"` + pub.TemplateID + `","public":true}`; strings.TrimSpace(string(r.body)) != want {
		t.Errorf("alias of A's public template: %s, want %s", r.body, want)
	}
	for _, ref := range []string{pub.TemplateID, "tapi-a/a-public", "tapi-a/a-public:default"} {
		r := e.do("POST", "/v2/sandboxes", b.APIKey, `{"templateID":"`+ref+`"}`)
		expect(t, "B creates from A's public "+ref, r, http.StatusCreated)
		if strings.Contains(string(r.body), marker) {
			t.Errorf("create from %s shows the marker: %s", ref, r.body)
		}
		var sb client.Sandbox
		decodeJSON(t, r, &sb)
		expect(t, "kill", e.do("DELETE", "/sandboxes/"+sb.SandboxID, b.APIKey, ""), http.StatusNoContent)
	}
	fromPub := e.createTemplate(b.APIKey, `{"name":"b-from-public"}`)
	expect(t, "B builds from A's public template", e.do("POST", "/v2/templates/"+fromPub.TemplateID+"/builds/"+fromPub.BuildID, b.APIKey,
		`{"fromTemplate":"tapi-a/a-public","steps":[{"type":"RUN","args":["true"]}]}`), http.StatusAccepted)
	if bi := e.waitBuild(b.APIKey, fromPub.TemplateID, fromPub.BuildID); bi.Status != "ready" {
		t.Fatalf("B's build from A's public template: %+v", bi)
	}
	r = e.do("GET", "/templates/"+fromPub.TemplateID+"/builds/"+fromPub.BuildID+"/logs", b.APIKey, "")
	expect(t, "B's own build log", r, http.StatusOK)
	if strings.Contains(string(r.body), marker) {
		t.Errorf("B's build from A's public template shows A's build output: %s", r.body)
	}

	// The operator's endpoints need the admin token.
	for _, rq := range []struct{ method, path string }{
		{"GET", "/admin/teams"}, {"GET", "/admin/teams/tapi-a"}, {"PATCH", "/admin/teams/tapi-b"},
		{"POST", "/admin/teams/tapi-a/sandboxes/kill"}, {"POST", "/admin/teams/tapi-a/api-keys"},
		{"GET", "/admin/sandboxes/running-counts"},
	} {
		if r := e.do(rq.method, rq.path, b.APIKey, `{"limits":{"maxConcurrent":1000}}`); r.status != http.StatusForbidden {
			t.Errorf("%s %s with team B's key: %d %s", rq.method, rq.path, r.status, r.body)
		}
	}

	// Team B guesses, from its own address, at the admin token and at
	// other teams' keys: past each failure budget, 429 (its own key too,
	// once it spent the key budget); the operator and team A, from their
	// addresses, are not affected.
	from := func(remote, hdr, val, path string) int {
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = remote
		req.Header.Set(hdr, val)
		w := httptest.NewRecorder()
		e.api.ServeHTTP(w, req)
		return w.Code
	}
	const teamB, teamA, operator = "198.51.100.2:1", "198.51.100.1:1", "192.0.2.1:1"
	for i := range apiserver.AdminFailureBurst + 1 {
		from(teamB, "X-Admin-Token", fmt.Sprintf("guess-%d", i), "/admin/teams")
	}
	if st := from(teamB, "X-Admin-Token", adminToken, "/admin/teams"); st != http.StatusTooManyRequests {
		t.Errorf("team B's address after admin token guesses, with the right token: %d, want 429", st)
	}
	if st := from(teamB, "X-API-Key", b.APIKey, "/sandboxes"); st != http.StatusOK {
		t.Errorf("team B's own key after its admin token guesses: %d", st)
	}
	for i := range apiserver.KeyFailureBurst + 1 {
		from(teamB, "X-API-Key", fmt.Sprintf("e2b_%040d", i), "/sandboxes")
	}
	if st := from(teamB, "X-API-Key", a.APIKey, "/sandboxes"); st != http.StatusTooManyRequests {
		t.Errorf("team B's address after key guesses, with a right key: %d, want 429", st)
	}
	if st := from(operator, "X-Admin-Token", adminToken, "/admin/teams"); st != http.StatusOK {
		t.Errorf("the operator after team B's guesses: %d", st)
	}
	if st := from(teamA, "X-API-Key", a.APIKey, "/sandboxes"); st != http.StatusOK {
		t.Errorf("team A after team B's guesses: %d", st)
	}

	// A's objects are as they were.
	ca := e.client(a.APIKey)
	for id, want := range map[string]sandbox.State{running.SandboxID: sandbox.StateRunning, paused.SandboxID: sandbox.StatePaused} {
		got, err := ca.Get(ctx, id)
		if err != nil || string(got.State) != string(want) {
			t.Fatalf("team A's sandbox %s after the attack: %+v, %v", id, got, err)
		}
	}
	expect(t, "A's template", e.do("GET", "/templates/"+tpl.TemplateID, a.APIKey, ""), http.StatusOK)
	expect(t, "A's snapshot", e.do("GET", "/templates/"+snapTemplate, a.APIKey, ""), http.StatusOK)
	r = e.do("GET", "/events/webhooks/"+hook.ID, a.APIKey, "")
	expect(t, "A's webhook", r, http.StatusOK)
	if !strings.Contains(string(r.body), "example.invalid") {
		t.Fatalf("A's webhook changed: %s", r.body)
	}
	for name, want := range map[string]bool{"a-private": false, "a-public": true} {
		var al struct {
			Public bool `json:"public"`
		}
		json.Unmarshal(e.do("GET", "/templates/aliases/"+name, a.APIKey, "").body, &al)
		if al.Public != want {
			t.Fatalf("team B changed whether A's %s is public (now %v)", name, al.Public)
		}
	}
	expect(t, "A's public template", e.do("GET", "/templates/"+pub.TemplateID+"/builds/"+pub.BuildID+"/status", a.APIKey, ""), http.StatusOK)
}
