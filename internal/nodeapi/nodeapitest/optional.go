package nodeapitest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// part returns n.Service as the optional part T. A node that lacks it
// fails the case, unless it is Partial (then the case is skipped): the
// agent and the RPC client must carry every part.
func part[T any](t *testing.T, n Node, name string) T {
	t.Helper()
	p, ok := n.Service.(T)
	if !ok {
		if n.Partial {
			t.Skipf("the node is no %s", name)
		}
		t.Fatalf("%T is no %s: the node must carry every optional part of the contract", n.Service, name)
	}
	return p
}

// waitReady waits until the pool of tmpl has ready members, or the test
// ends (its deadline fails it).
func waitReady(t *testing.T, pl nodeapi.Pooler, tmpl nodeapi.Template, ready int) nodeapi.PoolStatus {
	t.Helper()
	for {
		st, ok := pl.Pools()[tmpl.ID]
		if ok && st.Ready >= ready {
			return st
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("pool of %q never had %d ready members: %+v", tmpl.ID, ready, st)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func testPools(t *testing.T, n Node) {
	pl := part[nodeapi.Pooler](t, n, "Pooler")
	ctx := t.Context()
	req := request(n, "placeholder")
	tmpl, res := n.Template, req.Resources
	if err := pl.SetPool(ctx, tmpl, res, -1); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("SetPool of size -1: %v, want invalid", err)
	}
	if err := pl.SetPool(ctx, tmpl, res, 1); err != nil {
		t.Fatalf("SetPool: %v", err)
	}
	st := waitReady(t, pl, tmpl, 1)
	if st.BuildID != tmpl.BuildID || st.Size != 1 {
		t.Errorf("pool status %+v, want build %q size 1", st, tmpl.BuildID)
	}
	other := res
	other.DiskMB += 1024
	if _, ok := pl.Reserve(tmpl, other); ok {
		t.Error("Reserve with another disk size than the pool's: a hit")
	}
	id, ok := pl.Reserve(tmpl, res)
	if !ok || id == "" {
		t.Fatalf("Reserve of a ready pool: %q %t", id, ok)
	}
	// Given back, the member is reserved again.
	pl.Unreserve(id)
	again, ok := pl.Reserve(tmpl, res)
	if !ok || again != id {
		t.Fatalf("Reserve after Unreserve: %q %t, want %q", again, ok, id)
	}
	req = request(n, id)
	sb, err := n.Service.Create(ctx, req)
	if err != nil {
		t.Fatalf("Create of the reserved member %q: %v", id, err)
	}
	checkSandbox(t, "Create from the pool", sb, req)
	if st := pl.Pools()[tmpl.ID]; st.Hits < 2 || st.Misses < 1 {
		t.Errorf("pool counts %+v, want at least 2 hits and 1 miss", st)
	}
	if err := pl.SetPool(ctx, tmpl, res, 0); err != nil {
		t.Fatalf("SetPool 0: %v", err)
	}
	if st, ok := pl.Pools()[tmpl.ID]; ok {
		t.Errorf("pool after SetPool 0: %+v, want none", st)
	}
	if _, ok := pl.Reserve(tmpl, res); ok {
		t.Error("Reserve of a removed pool: a hit")
	}
	get(t, n, id) // the claimed member is a sandbox like any other
}

func testTemplatesInUse(t *testing.T, n Node) {
	h := part[nodeapi.TemplateHolder](t, n, "TemplateHolder")
	ctx := t.Context()
	create(t, n, "sb-tu")
	uses, err := h.TemplatesInUse(ctx)
	if err != nil {
		t.Fatalf("TemplatesInUse: %v", err)
	}
	want := nodeapi.TemplateUse{TemplateID: n.Template.ID, BuildID: n.Template.BuildID, RootFS: n.Template.RootFS, SandboxID: "sb-tu"}
	if n.Remote {
		want.RootFS = "" // a path on the node does not cross the wire
	}
	if !containsUse(uses, want) {
		t.Errorf("TemplatesInUse %+v, want %+v among them", uses, want)
	}
	if err := n.Service.Kill(ctx, "sb-tu", sandbox.KillRequest); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if uses, err = h.TemplatesInUse(ctx); err != nil {
		t.Fatalf("TemplatesInUse after Kill: %v", err)
	}
	if containsUse(uses, want) {
		t.Errorf("TemplatesInUse after Kill still has %+v", want)
	}
}

func containsUse(uses []nodeapi.TemplateUse, u nodeapi.TemplateUse) bool {
	for _, v := range uses {
		if v == u {
			return true
		}
	}
	return false
}

// snapshotDir is a directory for a snapshot (not made yet) that the node
// can write.
func snapshotDir(t *testing.T, name string) string {
	return filepath.Join(t.TempDir(), name)
}

// local checks that a remote node lacks the in-process part T (it names
// directories on the node) and reports whether the case goes on.
func local[T any](t *testing.T, n Node, name string) bool {
	t.Helper()
	if !n.Remote {
		return true
	}
	if _, ok := n.Service.(T); ok {
		t.Errorf("%T is a %s over a wire: a directory on the node would cross it", n.Service, name)
	}
	return false
}

func gone(t *testing.T, what, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %s is still there (%v)", what, dir, err)
	}
}

// snapshotRequest is the build the case's sandbox snapshot becomes.
var snapshotRequest = nodeapi.SnapshotRequest{TeamID: "team-sb-snap", TemplateID: "snapconformance00001", BuildID: "5b0c2f6e-1d3a-4e7b-9c8d-0a1b2c3d4e5f"}

// resolve is the template a create of the build t names (IDs only) gets
// from team's caller: the harness's Resolve, or t as it is for a node that
// resolves builds itself.
func resolve(t *testing.T, n Node, teamID string, tmpl nodeapi.Template) (nodeapi.Template, error) {
	t.Helper()
	if n.Resolve == nil {
		return tmpl, nil
	}
	return n.Resolve(t.Context(), teamID, tmpl)
}

func testSnapshotSandbox(t *testing.T, n Node) {
	sn := n.Snapshots
	if sn == nil {
		sn = part[nodeapi.SandboxSnapshotter](t, n, "SandboxSnapshotter")
	}
	ctx := t.Context()
	caps, err := n.Service.Capabilities(ctx)
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	req := snapshotRequest
	_, err = sn.SnapshotSandbox(ctx, "sb-none", req)
	if !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("SnapshotSandbox of an unknown sandbox: %v, want not found", err)
	}
	create(t, n, "sb-snap") // of team-sb-snap
	other := req
	other.TeamID = "team-other"
	if _, err := sn.SnapshotSandbox(ctx, "sb-snap", other); !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("SnapshotSandbox for another team: %v, want not found", err)
	}
	for _, bad := range []nodeapi.SnapshotRequest{
		{TeamID: req.TeamID, TemplateID: req.TemplateID, BuildID: "../../escape"},
		{TeamID: req.TeamID, TemplateID: "/etc", BuildID: req.BuildID},
		{TemplateID: req.TemplateID, BuildID: req.BuildID},
	} {
		if _, err := sn.SnapshotSandbox(ctx, "sb-snap", bad); !errors.Is(err, errdefs.ErrInvalid) && !errors.Is(err, errdefs.ErrUnsupported) {
			t.Errorf("SnapshotSandbox as %+v: %v, want invalid", bad, err)
		}
	}
	snap, err := sn.SnapshotSandbox(ctx, "sb-snap", req)
	if !caps.MemoryCheckpoint {
		wantClass(t, "SnapshotSandbox without memory checkpoint", err, errdefs.ErrUnsupported)
		return
	}
	if err != nil {
		t.Fatalf("SnapshotSandbox: %v", err)
	}
	if src := snap.Source; src.ID != n.Template.ID || src.BuildID != n.Template.BuildID || src.RootFS != "" || src.SnapshotDir != "" {
		t.Errorf("SnapshotSandbox's source %+v, want the source's %q/%q and no path", src, n.Template.ID, n.Template.BuildID)
	}
	if snap.RootFS.SHA256 == "" || snap.RootFS.Size <= 0 {
		t.Errorf("SnapshotSandbox's root filesystem artifact %+v, want one recorded", snap.RootFS)
	}
	if snap.Travels() != (snap.Host != nil) {
		t.Errorf("SnapshotSandbox: host %+v and snapshot artifact %+v disagree", snap.Host, snap.Snapshot)
	}
	if g := get(t, n, "sb-snap"); g.State != sandbox.StateRunning {
		t.Errorf("source after SnapshotSandbox: %v, want running", g.State)
	}
	wantClass(t, "SnapshotSandbox as a build the node holds", second(sn.SnapshotSandbox(ctx, "sb-snap", req)), errdefs.ErrAlreadyExists)

	// A create that names the snapshot's build restores it, for its team
	// only.
	ids := nodeapi.Template{ID: req.TemplateID, BuildID: req.BuildID}
	tmpl, err := resolve(t, n, req.TeamID, ids)
	if err != nil {
		t.Fatalf("resolve the snapshot's build: %v", err)
	}
	cr := request(n, "sb-restored")
	cr.TeamID, cr.Template = req.TeamID, tmpl
	sb, err := n.Service.Create(ctx, cr)
	if err != nil {
		t.Fatalf("Create from the snapshot: %v", err)
	}
	if sb.TemplateID != req.TemplateID || sb.BuildID != req.BuildID || sb.State != sandbox.StateRunning {
		t.Errorf("Create from the snapshot: %+v, want a running sandbox of build %s", sb, req.BuildID)
	}
	stolen, err := resolve(t, n, "team-thief", ids)
	if err == nil {
		cr := request(n, "sb-stolen")
		cr.TeamID, cr.Template = "team-thief", stolen
		_, err = n.Service.Create(ctx, cr)
	}
	wantClass(t, "another team's create from the snapshot", err, errdefs.ErrNotFound)
	if err := n.Service.Kill(ctx, "sb-restored", sandbox.KillRequest); err != nil {
		t.Fatalf("Kill: %v", err)
	}

	if err := sn.DeleteSandboxSnapshot(ctx, req.BuildID); err != nil {
		t.Fatalf("DeleteSandboxSnapshot: %v", err)
	}
	wantClass(t, "DeleteSandboxSnapshot again", sn.DeleteSandboxSnapshot(ctx, req.BuildID), errdefs.ErrNotFound)
	wantClass(t, "DeleteSandboxSnapshot of a build the node never took", sn.DeleteSandboxSnapshot(ctx, "0e0e0e0e-0000-4000-8000-000000000000"), errdefs.ErrNotFound)
	if tmpl, err := resolve(t, n, req.TeamID, ids); err == nil {
		cr := request(n, "sb-after-delete")
		cr.TeamID, cr.Template = req.TeamID, tmpl
		if _, err := n.Service.Create(ctx, cr); err == nil {
			t.Error("Create from a deleted snapshot succeeded")
		}
	}
}

// second returns err of a call's two results.
func second[T any](_ T, err error) error { return err }

func testSandboxLogs(t *testing.T, n Node) {
	ls := part[nodeapi.LogSource](t, n, "LogSource")
	ctx := t.Context()
	wantClass(t, "SandboxLogs of an unknown sandbox", second(ls.SandboxLogs(ctx, "sb-none", time.Time{})), errdefs.ErrNotFound)
	req := request(n, "sb-logs")
	req.EnvdAccessToken = "logs-access-token"
	if _, err := n.Service.Create(ctx, req); err != nil {
		t.Fatalf("Create: %v", err)
	}
	logs, err := ls.SandboxLogs(ctx, "sb-logs", time.Time{})
	if err != nil {
		t.Fatalf("SandboxLogs: %v", err)
	}
	if len(logs) == 0 {
		t.Fatal("SandboxLogs of a running sandbox: none; its envd keeps at least its own start")
	}
	for i, l := range logs {
		if l.Timestamp.IsZero() || l.Level == "" || l.Message == "" || l.Fields == nil {
			t.Errorf("SandboxLogs entry %d: %+v, want a time, a level, a message and fields", i, l)
		}
		if i > 0 && l.Timestamp.Before(logs[i-1].Timestamp) {
			t.Errorf("SandboxLogs entry %d is older than the one before", i)
		}
	}
	// From a start on (at the millisecond, as envd keeps it), nothing
	// older comes (the sandbox may log more meanwhile).
	start := logs[len(logs)-1].Timestamp.Truncate(time.Millisecond).Add(time.Millisecond)
	later, err := ls.SandboxLogs(ctx, "sb-logs", start)
	if err != nil {
		t.Fatalf("SandboxLogs from %v: %v", start, err)
	}
	for _, l := range later {
		if l.Timestamp.Before(start) {
			t.Errorf("SandboxLogs from %v: an entry of %v: %+v", start, l.Timestamp, l)
		}
	}
	if _, err := n.Service.Pause(ctx, "sb-logs", nodeapi.PauseRequest{}); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	wantClass(t, "SandboxLogs of a paused sandbox", second(ls.SandboxLogs(ctx, "sb-logs", time.Time{})), errdefs.ErrConflict)
}

func testSnapshotTemplate(t *testing.T, n Node) {
	if !local[nodeapi.TemplateSnapshotter](t, n, "TemplateSnapshotter") {
		return
	}
	sn := part[nodeapi.TemplateSnapshotter](t, n, "TemplateSnapshotter")
	ctx := t.Context()
	caps, err := n.Service.Capabilities(ctx)
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	dir := snapshotDir(t, "template-snap")
	tmpl := n.Template
	tmpl.Resources = sandbox.Resources{VCPUs: 1, MemoryMB: 256}
	err = sn.Snapshot(ctx, tmpl, "true", dir)
	if !caps.MemoryCheckpoint {
		wantClass(t, "Snapshot without memory checkpoint", err, errdefs.ErrUnsupported)
		return
	}
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if got := listed(t, n); len(got) != 0 {
		t.Errorf("List after Snapshot: %v, want no sandbox left", got)
	}
	tmpl.SnapshotDir = dir
	req := request(n, "sb-from-tsnap")
	req.Template = tmpl
	req.Resources = tmpl.Resources
	if _, err := n.Service.Create(ctx, req); err != nil {
		t.Fatalf("Create from the template snapshot: %v", err)
	}
	if err := n.Service.Kill(ctx, "sb-from-tsnap", sandbox.KillRequest); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := sn.DeleteSnapshot(ctx, dir); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	gone(t, "DeleteSnapshot", dir)
}
