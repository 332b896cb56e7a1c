package apiserver_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

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
