package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/pkg/client"
)

// Fairness between teams (docs/security.md, "Per-team fairness"): what one
// team does at once, in parallel, stays within its own limits and does
// not take what another team is owed.

// TestFairnessParallelSnapshots: snapshots in progress count against the
// team's maxSnapshots, so parallel requests cannot take more than the
// limit; another team's snapshots are not affected.
func TestFairnessParallelSnapshots(t *testing.T) {
	e := newTemplateEnv(t)
	base, err := e.local.Catalog.Resolve(context.Background(), "t1", "base")
	if err != nil {
		t.Fatal(err)
	}
	e.snaps.base = base
	e.snaps.gate = make(chan struct{})
	const limit, parallel = 2, 6
	a := e.adminTeam("tapi-snap-a", `{"id":"tapi-snap-a","limits":{"maxSnapshots":2}}`)
	b := e.adminTeam("tapi-snap-b", `{"id":"tapi-snap-b","limits":{"maxSnapshots":1}}`)
	src := e.create(a.APIKey, client.NewSandbox{TemplateID: "base"})
	srcB := e.create(b.APIKey, client.NewSandbox{TemplateID: "base"})

	statuses := make(chan int, parallel)
	var wg sync.WaitGroup
	for i := range parallel {
		wg.Go(func() {
			r := e.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", a.APIKey, `{"name":"par-`+itoa(i)+`"}`)
			statuses <- r.status
		})
	}
	// Wait until every request either answered or reached the node.
	deadline := time.Now().Add(time.Minute)
	for {
		e.snaps.mu.Lock()
		entered := e.snaps.entered
		e.snaps.mu.Unlock()
		if entered+len(statuses) >= parallel {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests reached the node and %d answered, of %d", entered, len(statuses), parallel)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(e.snaps.gate)
	wg.Wait()
	close(statuses)
	created, refused := 0, 0
	for st := range statuses {
		switch st {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Errorf("parallel snapshot: status %d", st)
		}
	}
	if created != limit || refused != parallel-limit {
		t.Fatalf("%d parallel snapshots with maxSnapshots %d: %d created, %d refused; want %d and %d",
			parallel, limit, created, refused, limit, parallel-limit)
	}
	expect(t, "team B's snapshot", e.do("POST", "/sandboxes/"+srcB.SandboxID+"/snapshots", b.APIKey, `{"name":"b"}`), http.StatusCreated)
	expect(t, "team A past its limit", e.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", a.APIKey, `{"name":"more"}`), http.StatusTooManyRequests)
}

// TestFairnessDiskBounds: a team's disk is bounded by default: a
// template (minFreeDiskMb) or a sandbox may not ask for more disk than the
// team's maxDiskMB (20 GiB unless set), and the operator sets the new
// fairness limits through the admin API.
func TestFairnessDiskBounds(t *testing.T) {
	e := newTemplateEnv(t)
	admin := []string{"X-Admin-Token", adminToken}
	a := e.adminTeam("tapi-disk", "")
	r := e.do("POST", "/v3/templates", a.APIKey, `{"name":"huge","minFreeDiskMb":30000}`)
	expect(t, "template over the team's default disk bound", r, http.StatusBadRequest)
	if !strings.Contains(string(r.body), "20480") {
		t.Errorf("refusal does not name the team's bound: %s", r.body)
	}
	r = e.do("PATCH", "/admin/teams/tapi-disk", "", `{"limits":{"maxDiskMB":40000,"maxBuilds":3,"maxWebhooks":2,"maxTemplateStorageMB":500}}`, admin...)
	expect(t, "set the team's limits", r, http.StatusOK)
	var got adminTeam
	decodeJSON(t, r, &got)
	if l := got.Limits; l.MaxDiskMB != 40000 || l.MaxBuilds != 3 || l.MaxWebhooks != 2 || l.MaxTemplateStorageMB != 500 {
		t.Fatalf("limits after PATCH: %+v", l)
	}
	expect(t, "template under the team's raised bound", e.do("POST", "/v3/templates", a.APIKey, `{"name":"huge","minFreeDiskMb":30000}`), http.StatusAccepted)
	// The template's disk is what its sandboxes get: over a lowered
	// bound, a create is refused.
	c := e.createTemplate(a.APIKey, `{"name":"roomy","minFreeDiskMb":16384}`)
	expect(t, "build", e.do("POST", "/v2/templates/"+c.TemplateID+"/builds/"+c.BuildID, a.APIKey, `{"fromTemplate":"base","steps":[{"type":"RUN","args":["true"]}]}`), http.StatusAccepted)
	if bi := e.waitBuild(a.APIKey, c.TemplateID, c.BuildID); bi.Status != "ready" {
		t.Fatalf("build: %+v", bi)
	}
	expect(t, "lower the bound", e.do("PATCH", "/admin/teams/tapi-disk", "", `{"limits":{"maxDiskMB":12288}}`, admin...), http.StatusOK)
	r = e.do("POST", "/v2/sandboxes", a.APIKey, `{"templateID":"roomy"}`)
	expect(t, "sandbox over the team's disk bound", r, http.StatusBadRequest)
}

// TestFairnessWebhookLimit: a team registers at most maxWebhooks
// webhooks, parallel requests included; another team is not affected.
func TestFairnessWebhookLimit(t *testing.T) {
	e := newTemplateEnv(t)
	e.api.MountEvents(apiserver.EventsConfig{})
	a := e.adminTeam("tapi-hooks-a", `{"id":"tapi-hooks-a","limits":{"maxWebhooks":2}}`)
	b := e.adminTeam("tapi-hooks-b", `{"id":"tapi-hooks-b","limits":{"maxWebhooks":1}}`)
	const parallel = 6
	statuses := make(chan int, parallel)
	var wg sync.WaitGroup
	for i := range parallel {
		wg.Go(func() {
			statuses <- e.do("POST", "/events/webhooks", a.APIKey, `{"name":"h`+itoa(i)+`","url":"https://example.invalid/`+itoa(i)+`","signatureSecret":"a-secret-123"}`).status
		})
	}
	wg.Wait()
	close(statuses)
	created := 0
	for st := range statuses {
		switch st {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("parallel webhook create: %d", st)
		}
	}
	if created != 2 {
		t.Fatalf("%d parallel webhook creates with maxWebhooks 2: %d created", parallel, created)
	}
	expect(t, "team B's webhook", e.do("POST", "/events/webhooks", b.APIKey, `{"url":"https://example.invalid/b","signatureSecret":"b-secret-123"}`), http.StatusCreated)
	expect(t, "team B's second webhook", e.do("POST", "/events/webhooks", b.APIKey, `{"url":"https://example.invalid/b2","signatureSecret":"b-secret-123"}`), http.StatusTooManyRequests)
}
