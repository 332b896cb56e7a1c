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

func testSnapshotSandbox(t *testing.T, n Node) {
	if !local[nodeapi.SandboxSnapshotter](t, n, "SandboxSnapshotter") {
		return
	}
	sn := part[nodeapi.SandboxSnapshotter](t, n, "SandboxSnapshotter")
	ctx := t.Context()
	caps, err := n.Service.Capabilities(ctx)
	if err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	dir := snapshotDir(t, "sandbox-snap")
	_, err = sn.SnapshotSandbox(ctx, "sb-none", dir)
	if !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("SnapshotSandbox of an unknown sandbox: %v, want not found", err)
	}
	create(t, n, "sb-snap")
	tmpl, err := sn.SnapshotSandbox(ctx, "sb-snap", dir)
	if !caps.MemoryCheckpoint {
		wantClass(t, "SnapshotSandbox without memory checkpoint", err, errdefs.ErrUnsupported)
		return
	}
	if err != nil {
		t.Fatalf("SnapshotSandbox: %v", err)
	}
	if tmpl.ID != n.Template.ID || tmpl.BuildID != n.Template.BuildID || tmpl.RootFS != n.Template.RootFS {
		t.Errorf("SnapshotSandbox's template %+v, want the source's %+v", tmpl, n.Template)
	}
	if g := get(t, n, "sb-snap"); g.State != sandbox.StateRunning {
		t.Errorf("source after SnapshotSandbox: %v, want running", g.State)
	}
	tmpl.SnapshotDir = dir
	req := request(n, "sb-restored")
	req.Template = tmpl
	if _, err := n.Service.Create(ctx, req); err != nil {
		t.Fatalf("Create from the snapshot: %v", err)
	}
	if err := n.Service.Kill(ctx, "sb-restored", sandbox.KillRequest); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := sn.DeleteSnapshot(ctx, dir); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	gone(t, "DeleteSnapshot", dir)
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
