package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/pkg/client"
)

type adminTeam struct {
	TeamID string `json:"teamID"`
	Name   string `json:"name"`
	APIKey string `json:"apiKey"`
	Limits struct {
		MaxConcurrent        int   `json:"maxConcurrent"`
		MaxVCPUs             int   `json:"maxVCPUs"`
		MaxMemoryMB          int64 `json:"maxMemoryMB"`
		MaxDiskMB            int64 `json:"maxDiskMB"`
		MaxTimeoutSeconds    int64 `json:"maxTimeoutSeconds"`
		MaxPaused            int   `json:"maxPaused"`
		MaxSnapshots         int   `json:"maxSnapshots"`
		MaxBuilds            int   `json:"maxBuilds"`
		MaxWebhooks          int   `json:"maxWebhooks"`
		MaxTemplateStorageMB int64 `json:"maxTemplateStorageMB"`
	} `json:"limits"`
}

// adminTeam makes a team through POST /admin/teams and returns it with its
// first key.
func (e *env) adminTeam(id, body string) adminTeam {
	e.t.Helper()
	if body == "" {
		body = `{"id":"` + id + `"}`
	}
	r := e.do("POST", "/admin/teams", "", body, "X-Admin-Token", adminToken)
	if r.status != http.StatusCreated {
		e.t.Fatalf("POST /admin/teams: %d %s", r.status, r.body)
	}
	var tm adminTeam
	if err := json.Unmarshal(r.body, &tm); err != nil {
		e.t.Fatal(err)
	}
	return tm
}

func TestAdminTeams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	admin := []string{"X-Admin-Token", adminToken}

	// Only the operator manages teams.
	for _, rq := range []struct{ method, path, body string }{
		{"POST", "/admin/teams", `{"id":"tapi-x"}`},
		{"GET", "/admin/teams", ""},
		{"GET", "/admin/teams/t1", ""},
		{"PATCH", "/admin/teams/t1", `{"limits":{"maxConcurrent":100}}`},
		{"DELETE", "/admin/teams/t2", ""},
	} {
		if r := e.do(rq.method, rq.path, e.key1, rq.body); r.status != http.StatusForbidden {
			t.Errorf("%s %s with a team key: %d %s, want 403", rq.method, rq.path, r.status, r.body)
		}
	}

	tm := e.adminTeam("tapi-a", `{"id":"tapi-a","name":"Team A","limits":{"maxConcurrent":1,"maxTimeoutSeconds":600}}`)
	if tm.TeamID != "tapi-a" || tm.Name != "Team A" || !strings.HasPrefix(tm.APIKey, "e2b_") || tm.Limits.MaxConcurrent != 1 || tm.Limits.MaxTimeoutSeconds != 600 {
		t.Fatalf("created team = %+v", tm)
	}
	if r := e.do("POST", "/admin/teams", "", `{"id":"tapi-a"}`, admin...); r.status != http.StatusConflict {
		t.Errorf("duplicate team: %d %s, want 409", r.status, r.body)
	}
	for _, bad := range []string{`{"id":"Upper"}`, `{"id":"a/b"}`, `{"id":"x","limits":{"maxConcurrent":-1}}`} {
		if r := e.do("POST", "/admin/teams", "", bad, admin...); r.status != http.StatusBadRequest {
			t.Errorf("POST /admin/teams %s: %d %s, want 400", bad, r.status, r.body)
		}
	}
	if r := e.do("GET", "/teams", tm.APIKey, ""); r.status != 200 || !strings.Contains(string(r.body), `"teamID":"tapi-a"`) {
		t.Fatalf("GET /teams with the new key: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/admin/teams", "", "", admin...); r.status != 200 || !strings.Contains(string(r.body), `"tapi-a"`) || strings.Contains(string(r.body), tm.APIKey) {
		t.Fatalf("GET /admin/teams: %d %s", r.status, r.body)
	}

	// The limit set at creation holds; PATCH changes only what it names.
	first := e.create(tm.APIKey, client.NewSandbox{})
	if r := e.do("POST", "/v2/sandboxes", tm.APIKey, `{"templateID":"base"}`); r.status != http.StatusTooManyRequests {
		t.Fatalf("second sandbox at a limit of 1: %d %s, want 429", r.status, r.body)
	}
	r := e.do("PATCH", "/admin/teams/tapi-a", "", `{"limits":{"maxConcurrent":2,"maxPaused":1,"maxSnapshots":1}}`, admin...)
	if r.status != 200 {
		t.Fatalf("PATCH: %d %s", r.status, r.body)
	}
	var patched adminTeam
	json.Unmarshal(r.body, &patched)
	if patched.Limits.MaxConcurrent != 2 || patched.Limits.MaxTimeoutSeconds != 600 || patched.Limits.MaxPaused != 1 || patched.Name != "Team A" {
		t.Fatalf("after PATCH: %+v", patched)
	}
	e.create(tm.APIKey, client.NewSandbox{})
	if r := e.do("POST", "/v2/sandboxes", tm.APIKey, `{"templateID":"base","timeout":3600}`); r.status != http.StatusBadRequest {
		t.Fatalf("timeout above the team's 600 s: %d %s, want 400", r.status, r.body)
	}
	if r := e.do("PATCH", "/admin/teams/nope", "", `{"name":"x"}`, admin...); r.status != http.StatusNotFound {
		t.Errorf("PATCH of a missing team: %d, want 404", r.status)
	}

	// Delete: refused while sandboxes live, then the key stops working.
	if r := e.do("DELETE", "/admin/teams/tapi-a", "", "", admin...); r.status != http.StatusConflict {
		t.Fatalf("delete with live sandboxes: %d %s, want 409", r.status, r.body)
	}
	if r := e.do("POST", "/admin/teams/tapi-a/sandboxes/kill", "", "", admin...); r.status != 200 {
		t.Fatalf("kill team's sandboxes: %d %s", r.status, r.body)
	}
	if ok, err := e.client(tm.APIKey).Kill(context.Background(), first.SandboxID); ok || err != nil {
		t.Fatalf("sandbox after the team's kill: %t %v", ok, err)
	}
	ctx := context.Background()
	killed := []sandbox.State{sandbox.StateKilled}
	if evs, err := e.st.QueryEvents(ctx, store.EventFilter{TeamID: "tapi-a"}); err != nil || len(evs) == 0 {
		t.Fatalf("team's events before the delete: %d, %v", len(evs), err)
	}
	if r := e.do("DELETE", "/admin/teams/tapi-a", "", "", admin...); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v2/sandboxes", tm.APIKey, ""); r.status != http.StatusUnauthorized {
		t.Fatalf("key of a deleted team: %d, want 401", r.status)
	}
	// Nothing of the deleted team stays, and its ID is not given again:
	// a new team of that ID would inherit nothing, but cannot be made.
	if sbs, err := e.st.ListSandboxes(ctx, store.SandboxFilter{TeamID: "tapi-a", States: killed}); err != nil || len(sbs) != 0 {
		t.Fatalf("deleted team's sandbox rows: %d, %v", len(sbs), err)
	}
	if evs, err := e.st.QueryEvents(ctx, store.EventFilter{TeamID: "tapi-a"}); err != nil || len(evs) != 0 {
		t.Fatalf("deleted team's events: %d, %v", len(evs), err)
	}
	if r := e.do("POST", "/admin/teams", "", `{"id":"tapi-a"}`, admin...); r.status != http.StatusConflict || !strings.Contains(string(r.body), "not reused") {
		t.Fatalf("a new team with the deleted team's ID: %d %s, want 409 (IDs are not reused)", r.status, r.body)
	}
	if r := e.do("GET", "/admin/teams/tapi-a", "", "", admin...); r.status != http.StatusNotFound {
		t.Fatalf("deleted team after a refused re-create: %d %s", r.status, r.body)
	}
	if r := e.do("DELETE", "/admin/teams/tapi-a", "", "", admin...); r.status != http.StatusNotFound {
		t.Fatalf("second delete: %d, want 404", r.status)
	}
	if r := e.do("DELETE", "/admin/teams/default", "", "", admin...); r.status != http.StatusConflict {
		t.Fatalf("delete of the default team: %d, want 409", r.status)
	}
}

// TestResumeAndPauseLimits: a resume (connect, resume, auto-resume) takes
// a concurrency slot as a create does, and a team keeps no more paused
// sandboxes than its limit.
func TestResumeAndPauseLimits(t *testing.T) {
	t.Parallel()
	var e *env
	e = newEnv(t, func(c *lifecycle.Config) {
		c.TeamLimits = func(ctx context.Context, teamID string) (lifecycle.TeamLimits, error) {
			return apiserver.LifecycleLimits(e.st, store.Limits{})(ctx, teamID)
		}
	})
	ctx := context.Background()
	tm := e.adminTeam("tapi-lim", `{"id":"tapi-lim","limits":{"maxConcurrent":1,"maxPaused":1}}`)
	a := e.create(tm.APIKey, client.NewSandbox{AutoResume: &client.AutoResume{Enabled: true}})
	expect(t, "pause a", e.do("POST", "/sandboxes/"+a.SandboxID+"/pause", tm.APIKey, ""), http.StatusNoContent)
	b := e.create(tm.APIKey, client.NewSandbox{}) // the one running slot
	for _, rq := range []struct{ path, body string }{
		{"/v2/sandboxes/" + a.SandboxID + "/connect", `{"timeout":60}`},
		{"/sandboxes/" + a.SandboxID + "/connect", `{"timeout":60}`},
		{"/sandboxes/" + a.SandboxID + "/resume", `{"timeout":60}`},
	} {
		r := e.do("POST", rq.path, tm.APIKey, rq.body)
		expect(t, "resume at the limit "+rq.path, r, http.StatusTooManyRequests)
		if r.header.Get("Retry-After") == "" {
			t.Errorf("%s: 429 without Retry-After", rq.path)
		}
	}
	if _, err := e.lc.Route(ctx, a.SandboxID, nil); !errdefs.IsExhausted(err) {
		t.Fatalf("auto-resume at the limit: %v, want exhausted", err)
	}
	if got, _ := e.client(tm.APIKey).Get(ctx, a.SandboxID); got == nil || got.State != "paused" {
		t.Fatalf("refused resume changed the sandbox: %+v", got)
	}
	// A second paused sandbox is over the paused limit.
	expect(t, "pause over the paused limit", e.do("POST", "/sandboxes/"+b.SandboxID+"/pause", tm.APIKey, ""), http.StatusTooManyRequests)
	// Once b is gone, a resumes, and then holds the slot against creates.
	if ok, err := e.client(tm.APIKey).Kill(ctx, b.SandboxID); !ok || err != nil {
		t.Fatalf("kill b: %t %v", ok, err)
	}
	expect(t, "resume with a free slot", e.do("POST", "/v2/sandboxes/"+a.SandboxID+"/connect", tm.APIKey, `{"timeout":60}`), http.StatusCreated)
	expect(t, "create while the resumed one runs", e.do("POST", "/v2/sandboxes", tm.APIKey, `{"templateID":"base"}`), http.StatusTooManyRequests)
	// Other teams are not affected.
	e.create(e.key2, client.NewSandbox{})
}

// TestSnapshotLimit: a team keeps no more snapshots than its limit.
func TestSnapshotLimit(t *testing.T) {
	e := newTemplateEnv(t)
	base, err := e.local.Catalog.Resolve(context.Background(), "t1", "base")
	if err != nil {
		t.Fatal(err)
	}
	e.snaps.base = base
	tm := e.adminTeam("tapi-snap", `{"id":"tapi-snap","limits":{"maxSnapshots":1}}`)
	src := e.create(tm.APIKey, client.NewSandbox{TemplateID: "base"})
	expect(t, "first snapshot", e.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", tm.APIKey, `{"name":"one"}`), http.StatusCreated)
	expect(t, "second snapshot", e.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", tm.APIKey, `{"name":"two"}`), http.StatusTooManyRequests)
	if r := e.do("GET", "/snapshots", tm.APIKey, ""); strings.Contains(string(r.body), "two") {
		t.Fatalf("refused snapshot listed: %s", r.body)
	}
	// Deleting one frees the slot.
	expect(t, "delete", e.do("DELETE", "/templates/one", tm.APIKey, ""), http.StatusNoContent)
	expect(t, "snapshot after delete", e.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", tm.APIKey, `{"name":"two"}`), http.StatusCreated)
}
