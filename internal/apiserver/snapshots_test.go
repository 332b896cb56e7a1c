package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/pkg/client"
)

// fakeSnapshotter stands in for the node agent's snapshots
// (nodebuild.SandboxAgent): it writes a marker into the directory and
// returns the base template as the source.
type fakeSnapshotter struct {
	node *fakenode.Node
	base nodeapi.Template
	// Unsupported makes SnapshotSandbox fail as a driver without memory
	// checkpoint does.
	Unsupported bool

	// gate, when set, holds every SnapshotSandboxInto until it is
	// closed; entered counts the calls that reached it.
	gate    chan struct{}
	mu      sync.Mutex
	entered int
	taken   []string // dirs
	deleted []string // dirs
}

func (f *fakeSnapshotter) Get(ctx context.Context, id string) (*nodeapi.Sandbox, error) {
	return f.node.Get(ctx, id)
}

func (f *fakeSnapshotter) SnapshotSandboxInto(ctx context.Context, id, dir string, _ bool) (nodeapi.Template, error) {
	if f.Unsupported {
		return nodeapi.Template{}, fmt.Errorf("sandbox %q: driver fake cannot checkpoint memory: %w", id, errdefs.ErrUnsupported)
	}
	if f.gate != nil {
		f.mu.Lock()
		f.entered++
		f.mu.Unlock()
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nodeapi.Template{}, ctx.Err()
		}
	}
	sb, err := f.node.Get(ctx, id)
	if err != nil {
		return nodeapi.Template{}, err
	}
	if sb.State != sandbox.StateRunning {
		return nodeapi.Template{}, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrConflict)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nodeapi.Template{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "memory"), []byte(id), 0o600); err != nil {
		return nodeapi.Template{}, err
	}
	f.mu.Lock()
	f.taken = append(f.taken, dir)
	f.mu.Unlock()
	t := f.base
	t.Env = map[string]string{"FROM_SOURCE": "1"}
	return t, nil
}

func (f *fakeSnapshotter) DeleteSnapshot(_ context.Context, dir string) error {
	f.mu.Lock()
	if _, err := os.Stat(filepath.Join(dir, "memory")); err != nil {
		dir = "missing:" + dir // the node could not find its saved layer
	}
	f.deleted = append(f.deleted, dir)
	f.mu.Unlock()
	return os.RemoveAll(dir)
}

// lossySnapshots loses the node's answer to a snapshot it took, when
// lose is set (the client went away, the connection broke).
type lossySnapshots struct {
	nodeapi.SandboxSnapshotter
	lose atomic.Bool
}

func (l *lossySnapshots) SnapshotSandbox(ctx context.Context, id string, req nodeapi.SnapshotRequest) (*nodeapi.SandboxSnapshot, error) {
	s, err := l.SandboxSnapshotter.SnapshotSandbox(ctx, id, req)
	if err == nil && l.lose.Load() {
		return nil, fmt.Errorf("the node's answer was lost: %w", errdefs.ErrUnavailable)
	}
	return s, err
}

// recNode records the templates sandboxes are created from.
type recNode struct {
	*fakenode.Node
	mu      sync.Mutex
	creates []nodeapi.CreateRequest
}

func (n *recNode) Create(ctx context.Context, req nodeapi.CreateRequest) (*nodeapi.Sandbox, error) {
	n.mu.Lock()
	n.creates = append(n.creates, req)
	n.mu.Unlock()
	return n.Node.Create(ctx, req)
}

func (n *recNode) last() nodeapi.CreateRequest {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.creates[len(n.creates)-1]
}

type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func TestSnapshots(t *testing.T) {
	e := newTemplateEnv(t)
	ctx := context.Background()
	base, err := e.local.Catalog.Resolve(ctx, "t1", "base")
	if err != nil {
		t.Fatal(err)
	}
	e.snaps.base = base

	src := e.create(e.key1, client.NewSandbox{TemplateID: "base"})
	other := e.create(e.key1, client.NewSandbox{TemplateID: "base"})

	// Unnamed: the template ID with the default tag, no names.
	r := e.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", e.key1, "")
	expect(t, "snapshot", r, http.StatusCreated)
	var s1 snapshotInfo
	decodeJSON(t, r, &s1)
	if !strings.HasSuffix(s1.SnapshotID, ":default") || s1.Names == nil || len(s1.Names) != 0 {
		t.Fatalf("snapshot: %s", r.body)
	}
	// Named, twice: the second is a new build under another tag.
	r = e.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", e.key1, `{"name":"snap-a"}`)
	expect(t, "named snapshot", r, http.StatusCreated)
	var s2 snapshotInfo
	decodeJSON(t, r, &s2)
	if s2.SnapshotID != "snap-a:default" || !slices.Equal(s2.Names, []string{"snap-a:default"}) {
		t.Fatalf("named snapshot: %s", r.body)
	}
	r = e.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", e.key1, `{"name":"snap-a:v2"}`)
	expect(t, "tagged snapshot", r, http.StatusCreated)
	var s3 snapshotInfo
	decodeJSON(t, r, &s3)
	if s3.SnapshotID != "snap-a:v2" {
		t.Fatalf("tagged snapshot: %s", r.body)
	}
	r = e.do("POST", "/sandboxes/"+other.SandboxID+"/snapshots", e.key1, `{"name":"snap-b"}`)
	expect(t, "snapshot of the other sandbox", r, http.StatusCreated)

	// Each snapshot is an event of the source.
	evs, err := e.st.ListEvents(ctx, src.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	var snapIDs []string
	for _, ev := range evs {
		if ev.Type == store.EventCheckpointed {
			snapIDs = append(snapIDs, ev.Data.SnapshotID)
		}
	}
	if !slices.Equal(snapIDs, []string{s1.SnapshotID, s2.SnapshotID, s3.SnapshotID}) {
		t.Fatalf("checkpointed events: %v", snapIDs)
	}

	// A sandbox from a snapshot restores its memory image.
	for _, ref := range []string{s1.SnapshotID, "snap-a", "snap-a:v2"} {
		sb := e.create(e.key1, client.NewSandbox{TemplateID: ref})
		req := e.recNode.last()
		if req.ID != sb.SandboxID || req.Template.SnapshotDir == "" || req.Template.Env["FROM_SOURCE"] != "1" || req.Template.RootFS != base.RootFS {
			t.Fatalf("create from %s: node got template %+v", ref, req.Template)
		}
		if _, err := os.Stat(filepath.Join(req.Template.SnapshotDir, "memory")); err != nil {
			t.Fatalf("create from %s: %v", ref, err)
		}
	}

	// List: newest first, filters, pagination.
	list := func(query, key string) ([]snapshotInfo, string) {
		t.Helper()
		r := e.do("GET", "/snapshots"+query, key, "")
		expect(t, "list "+query, r, http.StatusOK)
		var out []snapshotInfo
		decodeJSON(t, r, &out)
		return out, r.header.Get("X-Next-Token")
	}
	all, _ := list("", e.key1)
	if len(all) != 4 || all[0].SnapshotID != "snap-b:default" || all[3].SnapshotID != s1.SnapshotID {
		t.Fatalf("list: %+v", all)
	}
	if got, _ := list("?sandboxID="+src.SandboxID, e.key1); len(got) != 3 {
		t.Fatalf("list by sandbox: %+v", got)
	}
	if got, _ := list("?name=snap-a", e.key1); len(got) != 2 {
		t.Fatalf("list by name: %+v", got)
	}
	if got, _ := list("?name=snap-a:v2", e.key1); len(got) != 1 || got[0].SnapshotID != "snap-a:v2" {
		t.Fatalf("list by name and tag: %+v", got)
	}
	page, next := list("?limit=3", e.key1)
	if len(page) != 3 || next == "" {
		t.Fatalf("page 1: %+v %q", page, next)
	}
	if page2, next2 := list("?limit=3&nextToken="+next, e.key1); len(page2) != 1 || next2 != "" {
		t.Fatalf("page 2: %+v %q", page2, next2)
	}
	if got, _ := list("", e.key2); len(got) != 0 {
		t.Fatalf("another team sees snapshots: %+v", got)
	}
	expect(t, "list bad limit", e.do("GET", "/snapshots?limit=0", e.key1, ""), 400)
	expect(t, "list bad token", e.do("GET", "/snapshots?nextToken=zz", e.key1, ""), 400)

	// Delete: the template goes; the node's snapshot stays for sandboxes
	// that may still use it (the template collector frees it later).
	id, _, _ := strings.Cut(s1.SnapshotID, ":")
	expect(t, "delete snapshot", e.do("DELETE", "/templates/"+id, e.key1, ""), 204)
	expect(t, "delete snapshot again", e.do("DELETE", "/templates/"+id, e.key1, ""), 404)
	if len(e.snaps.deleted) != 0 {
		t.Fatalf("node snapshots deleted at once: %v", e.snaps.deleted)
	}
	if got, _ := list("", e.key1); len(got) != 3 {
		t.Fatalf("list after delete: %+v", got)
	}
	expect(t, "create from deleted snapshot", e.do("POST", "/v2/sandboxes", e.key1, `{"templateID":"`+s1.SnapshotID+`"}`), 404)

	// Errors.
	paused := e.create(e.key1, client.NewSandbox{TemplateID: "base"})
	expect(t, "pause", e.do("POST", "/sandboxes/"+paused.SandboxID+"/pause", e.key1, ""), 204)
	for _, tc := range []struct {
		name, id, key, body string
		status              int
	}{
		{"unknown sandbox", "nope", e.key1, "", 404},
		{"another team's sandbox", src.SandboxID, e.key2, "", 404},
		{"paused sandbox", paused.SandboxID, e.key1, "", 409},
		{"bad name", src.SandboxID, e.key1, `{"name":"Bad Name"}`, 400},
		{"name of another team", src.SandboxID, e.key1, `{"name":"other-team"}`, 201}, // names are per team
		{"reserved name", src.SandboxID, e.key1, `{"name":"base"}`, 403},
		{"namespace of another team", src.SandboxID, e.key1, `{"name":"t2/x"}`, 400},
		{"no key", src.SandboxID, "", "", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "name of another team" {
				e.createTemplate(e.key2, `{"name":"other-team"}`)
			}
			expect(t, tc.name, e.do("POST", "/sandboxes/"+tc.id+"/snapshots", tc.key, tc.body), tc.status)
		})
	}
	t.Run("answer lost", func(t *testing.T) {
		e.lossy.lose.Store(true)
		defer e.lossy.lose.Store(false)
		before, _ := list("", e.key1)
		taken := len(e.snaps.taken)
		r := e.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", e.key1, `{"name":"lost"}`)
		if r.status < 500 {
			t.Fatalf("snapshot whose answer was lost: %d %s", r.status, r.body)
		}
		if len(e.snaps.taken) != taken+1 {
			t.Fatalf("the node took %d snapshots, want 1", len(e.snaps.taken)-taken)
		}
		if d := e.snaps.deleted; len(d) == 0 || d[len(d)-1] != e.snaps.taken[taken] {
			t.Fatalf("the snapshot the node took (%s) was not deleted: %v", e.snaps.taken[taken], d)
		}
		if after, _ := list("", e.key1); len(after) != len(before) {
			t.Fatalf("a lost snapshot is listed: %d → %d", len(before), len(after))
		}
		expect(t, "alias of the lost snapshot", e.do("GET", "/templates/aliases/lost", e.key1, ""), 404)
	})
	t.Run("driver without memory checkpoint", func(t *testing.T) {
		e.snaps.Unsupported = true
		defer func() { e.snaps.Unsupported = false }()
		before, _ := list("", e.key1)
		r := e.do("POST", "/sandboxes/"+src.SandboxID+"/snapshots", e.key1, `{"name":"never"}`)
		expect(t, "unsupported", r, http.StatusNotImplemented)
		if !strings.Contains(string(r.body), "runsc") {
			t.Fatalf("unsupported: %s", r.body)
		}
		after, _ := list("", e.key1)
		if len(after) != len(before) {
			t.Fatalf("a failed snapshot left a template: %d → %d", len(before), len(after))
		}
		expect(t, "alias of the failed snapshot", e.do("GET", "/templates/aliases/never", e.key1, ""), 404)
	})
}

func TestSnapshotsUnconfigured(t *testing.T) {
	e := newEnv(t)
	sb := e.create(e.key1, client.NewSandbox{})
	expect(t, "create", e.do("POST", "/sandboxes/"+sb.SandboxID+"/snapshots", e.key1, ""), http.StatusNotImplemented)
	expect(t, "unknown sandbox", e.do("POST", "/sandboxes/nope/snapshots", e.key1, ""), http.StatusNotFound)
	r := e.do("GET", "/snapshots", e.key1, "")
	expect(t, "list", r, http.StatusOK)
	if string(r.body) != "[]" {
		t.Fatalf("list: %s", r.body)
	}
}
