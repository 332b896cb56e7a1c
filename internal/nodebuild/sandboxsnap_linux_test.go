package nodebuild_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/templates"
)

// sandboxAgent is the node agent's part of a sandbox snapshot as these
// tests see it: one running sandbox of team-a started from p's build, and
// a snapshot that writes what the agent writes (a memory image, its
// description with the host it was taken on, the layer's changes).
type sandboxAgent struct {
	p     *peer
	host  *nodeapi.SnapshotHost // nil: the snapshot stays on its node
	layer []byte                // the layer's changes, with host

	mu      sync.Mutex
	taken   []string // dirs
	deleted []string // dirs
}

func (a *sandboxAgent) Get(_ context.Context, id string) (*nodeapi.Sandbox, error) {
	if id != "sb1" {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return &nodeapi.Sandbox{ID: id, TeamID: "team-a", TemplateID: tmpl.ID, BuildID: build.ID, State: sandbox.StateRunning,
		Resources: sandbox.Resources{VCPUs: 2, MemoryMB: 512, DiskMB: 1024}, EnvdVersion: "0.5.0"}, nil
}

func (a *sandboxAgent) SnapshotSandboxInto(_ context.Context, id, dir string, travel bool) (nodeapi.Template, error) {
	if !travel {
		return nodeapi.Template{}, fmt.Errorf("a node's snapshots are taken to travel: %w", errdefs.ErrInvalid)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nodeapi.Template{}, err
	}
	meta, _ := json.Marshal(map[string]any{"version": 1, "initToken": "init-token", "layer": "saved-" + id, "host": a.host})
	files := map[string][]byte{"checkpoint.img": bytes.Repeat([]byte("memory of "+id), 1000), nodeapi.SnapshotMetaFile: meta}
	if a.host != nil {
		files[nodeapi.SnapshotLayerTar] = a.layer
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nodeapi.Template{}, err
		}
	}
	a.mu.Lock()
	a.taken = append(a.taken, dir)
	a.mu.Unlock()
	return nodeapi.Template{ID: tmpl.ID, BuildID: build.ID, RootFS: filepath.Join(a.p.local.Catalog.BuildDir(build.ID), "rootfs"),
		Env: map[string]string{"FROM": "source"}, User: "user", Workdir: "/home/user", StartCmd: "sleep infinity"}, nil
}

func (a *sandboxAgent) DeleteSnapshot(_ context.Context, dir string) error {
	a.mu.Lock()
	a.deleted = append(a.deleted, dir)
	a.mu.Unlock()
	return os.RemoveAll(dir)
}

func (a *sandboxAgent) deletes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.deleted...)
}

// snapReq is the build team-a's snapshot becomes.
var snapReq = nodeapi.SnapshotRequest{TeamID: "team-a", TemplateID: "snaptmplaaaaaaaaaaaa", BuildID: "7c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f"}

// holdSandboxSnapshot takes sandbox sb1's snapshot on p, as `warren node`
// keeps it, and returns what p reported.
func (p *peer) holdSandboxSnapshot(t *testing.T, agent *sandboxAgent) (*nodebuild.SandboxSnapshots, *nodeapi.SandboxSnapshot) {
	t.Helper()
	ss, err := nodebuild.NewSandboxSnapshots(nodebuild.SandboxSnapshotsConfig{Agent: agent, Catalog: p.local.Catalog, Node: p.node})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := ss.SnapshotSandbox(context.Background(), "sb1", snapReq)
	if err != nil {
		t.Fatal(err)
	}
	return ss, snap
}

// TestSandboxSnapshotTravels: a sandbox snapshot taken on one node
// becomes a ready copy of the build there, whose root filesystem artifact
// is the source build's own (one tar for every snapshot of its
// sandboxes), with a snapshot artifact and the host recorded; a node
// that pulls the build gets both, checked, hands the agent the snapshot
// and starts the build only from it; another team starts it nowhere.
func TestSandboxSnapshotTravels(t *testing.T) {
	t.Parallel()
	holder := newPeer(t, nil)
	holder.holdBuild(t)
	agent := &sandboxAgent{p: holder, host: &builderHost, layer: goodLayer(t)}
	_, snap := holder.holdSandboxSnapshot(t, agent)
	if !snap.Travels() || !snap.Host.Equal(builderHost) || snap.Source.ID != tmpl.ID || snap.Source.BuildID != build.ID ||
		snap.Source.RootFS != "" || snap.Source.SnapshotDir != "" || snap.Source.Env["FROM"] != "source" {
		t.Fatalf("reported snapshot: %+v", snap)
	}
	ctx := context.Background()
	src, err := holder.local.Catalog.Build(ctx, build.ID)
	if err != nil {
		t.Fatal(err)
	}
	if snap.RootFS.SHA256 != src.RootFSSHA256 || snap.RootFS.Size != src.RootFSSize {
		t.Errorf("snapshot's root filesystem artifact %+v, want the source build's %s/%d", snap.RootFS, src.RootFSSHA256, src.RootFSSize)
	}
	a, errA := os.Stat(filepath.Join(holder.local.Catalog.BuildDir(build.ID), nodebuild.ArtifactName))
	b, errB := os.Stat(filepath.Join(holder.local.Catalog.BuildDir(snapReq.BuildID), nodebuild.ArtifactName))
	if errA != nil || errB != nil || a.Sys().(*syscall.Stat_t).Ino != b.Sys().(*syscall.Stat_t).Ino {
		t.Errorf("the snapshot's root filesystem artifact is not the source's file: %v %v", errA, errB)
	}
	held, err := holder.local.Catalog.HeldBuilds(ctx)
	if err != nil || !contains(held, snapReq.BuildID) {
		t.Errorf("the holder's held builds %v (%v) lack the snapshot's", held, err)
	}
	ids := nodeapi.Template{ID: snapReq.TemplateID, BuildID: snapReq.BuildID}
	here, err := holder.node.Resolve(ctx, "team-a", ids)
	if err != nil || here.SnapshotDir != filepath.Join(holder.local.Catalog.BuildDir(snapReq.BuildID), "snapshot") || here.RootFS != snap0RootFS(holder) {
		t.Fatalf("on the holder: %+v %v; want the snapshot over the source's tree", here, err)
	}

	snaps := &agentSnaps{host: builderHost}
	puller := newPeer(t, sourceFrom(t, holder, holder.srv.URL), withSnapshots(snaps))
	got, err := puller.node.Resolve(ctx, "team-a", ids)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(puller.local.Catalog.BuildDir(snapReq.BuildID), "snapshot")
	if got.SnapshotDir != want || got.Env["FROM"] != "source" || got.BuildID != snapReq.BuildID {
		t.Fatalf("on the puller: %+v; want its copy of the snapshot", got)
	}
	if snaps.imports() != 1 || !bytes.Equal(snaps.imported[0]["checkpoint.img"], bytes.Repeat([]byte("memory of sb1"), 1000)) {
		t.Fatalf("the puller's agent imported %d snapshots", snaps.imports())
	}
	if got := puller.counter(t, "node_template_snapshot_pulls_total", "restorable"); got != 1 {
		t.Errorf("node_template_snapshot_pulls_total{result=restorable} = %v, want 1", got)
	}
	for _, team := range []string{"team-b", ""} {
		if _, err := puller.node.Resolve(ctx, team, ids); !errdefs.IsNotFound(err) {
			t.Errorf("team %q's Resolve on the puller: %v, want not found", team, err)
		}
		if _, err := holder.node.Resolve(ctx, team, ids); !errdefs.IsNotFound(err) {
			t.Errorf("team %q's Resolve on the holder: %v, want not found", team, err)
		}
	}
}

// snap0RootFS is the source's tree on p, which a snapshot of its sandbox
// lies over.
func snap0RootFS(p *peer) string { return filepath.Join(p.local.Catalog.BuildDir(build.ID), "rootfs") }

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestSandboxSnapshotNeverStartsCold: a node that cannot restore a
// sandbox snapshot (its host lacks a CPU flag the snapshot's had, or the
// snapshot stays on its node) does not pull the build at all (fetches
// nothing), refuses the create and keeps nothing of it: a cold start would
// lack the sandbox's files and memory.
func TestSandboxSnapshotNeverStartsCold(t *testing.T) {
	t.Parallel()
	missingFlag := builderHost
	missingFlag.CPUFlags = []string{"fpu"}
	for name, c := range map[string]struct {
		taken *nodeapi.SnapshotHost
		here  nodeapi.SnapshotHost
		class error
	}{
		"a CPU flag missing": {&builderHost, missingFlag, errdefs.ErrUnsupported},
		"for its node alone": {nil, builderHost, errdefs.ErrNotFound},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			holder := newPeer(t, nil)
			holder.holdBuild(t)
			_, snap := holder.holdSandboxSnapshot(t, &sandboxAgent{p: holder, host: c.taken, layer: goodLayer(t)})
			if snap.Travels() != (c.taken != nil) {
				t.Fatalf("reported snapshot %+v: travels %t", snap, snap.Travels())
			}
			snaps := &agentSnaps{host: c.here}
			puller := newPeer(t, sourceFrom(t, holder, holder.srv.URL), withSnapshots(snaps))
			ctx := context.Background()
			ids := nodeapi.Template{ID: snapReq.TemplateID, BuildID: snapReq.BuildID}
			if got, err := puller.node.Resolve(ctx, "team-a", ids); err == nil || !errors.Is(err, c.class) {
				t.Fatalf("Resolve on the puller: %+v %v; want a refusal (%v)", got, err, c.class)
			}
			if _, err := puller.local.Catalog.Build(ctx, snapReq.BuildID); !errdefs.IsNotFound(err) {
				t.Errorf("the puller recorded the build it cannot restore: %v", err)
			}
			if _, err := os.Stat(puller.local.Catalog.BuildDir(snapReq.BuildID)); !os.IsNotExist(err) {
				t.Errorf("the puller kept files of the build: %v", err)
			}
			if snaps.imports() != 0 {
				t.Errorf("the puller's agent imported %d snapshots", snaps.imports())
			}
			if h, s := holder.rootfsHits.Load(), holder.snapshotHits.Load(); h != 0 || s != 0 {
				t.Errorf("the puller fetched %d root filesystems and %d snapshots it could not use", h, s)
			}
		})
	}
}

// TestSandboxSnapshotRefusals: the node takes a snapshot only as a new
// build of the sandbox's own team, named by IDs that are no paths; a
// build it holds already (a template's) keeps its files.
func TestSandboxSnapshotRefusals(t *testing.T) {
	t.Parallel()
	p := newPeer(t, nil)
	p.holdBuild(t)
	agent := &sandboxAgent{p: p, host: &builderHost, layer: goodLayer(t)}
	ss, err := nodebuild.NewSandboxSnapshots(nodebuild.SandboxSnapshotsConfig{Agent: agent, Catalog: p.local.Catalog, Node: p.node})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		id    string
		req   nodeapi.SnapshotRequest
		class error
	}{
		{"another team's sandbox", "sb1", nodeapi.SnapshotRequest{TeamID: "team-b", TemplateID: snapReq.TemplateID, BuildID: snapReq.BuildID}, errdefs.ErrNotFound},
		{"no sandbox", "sb2", snapReq, errdefs.ErrNotFound},
		{"a build that is a path", "sb1", nodeapi.SnapshotRequest{TeamID: "team-a", TemplateID: snapReq.TemplateID, BuildID: "../../../etc"}, errdefs.ErrInvalid},
		{"a template that is a path", "sb1", nodeapi.SnapshotRequest{TeamID: "team-a", TemplateID: "a/b", BuildID: snapReq.BuildID}, errdefs.ErrInvalid},
		{"a system template", "sb1", nodeapi.SnapshotRequest{TeamID: "team-a", TemplateID: templates.BaseID, BuildID: snapReq.BuildID}, errdefs.ErrInvalid},
		{"no team", "sb1", nodeapi.SnapshotRequest{TemplateID: snapReq.TemplateID, BuildID: snapReq.BuildID}, errdefs.ErrInvalid},
		{"a build the node holds", "sb1", nodeapi.SnapshotRequest{TeamID: "team-a", TemplateID: tmpl.ID, BuildID: build.ID}, errdefs.ErrAlreadyExists},
	} {
		if _, err := ss.SnapshotSandbox(ctx, c.id, c.req); !errors.Is(err, c.class) {
			t.Errorf("%s: %v, want %v", c.name, err, c.class)
		}
	}
	if len(agent.taken) != 0 {
		t.Fatalf("snapshots taken for refused requests: %v", agent.taken)
	}
	if _, err := os.Stat(filepath.Join(p.local.Catalog.BuildDir(build.ID), "rootfs", "hi")); err != nil {
		t.Fatalf("the held build's files: %v", err)
	}

	// A snapshot the control plane failed to record is deleted: its
	// files go, its copy is failed and untagged (the collector frees the
	// rest), and it no longer resolves.
	if _, err := ss.SnapshotSandbox(ctx, "sb1", snapReq); err != nil {
		t.Fatal(err)
	}
	if err := ss.DeleteSandboxSnapshot(ctx, snapReq.BuildID); err != nil {
		t.Fatal(err)
	}
	if d := agent.deletes(); len(d) != 1 || d[0] != filepath.Join(p.local.Catalog.BuildDir(snapReq.BuildID), "snapshot") {
		t.Errorf("deleted snapshots %v", d)
	}
	b, err := p.local.Catalog.Build(ctx, snapReq.BuildID)
	if err != nil || b.Status != templates.BuildError || b.SnapshotDir != "" {
		t.Errorf("the deleted snapshot's copy: %+v %v", b, err)
	}
	if st, err := p.local.Catalog.Store().GetTemplate(ctx, snapReq.TemplateID); err != nil || len(st.Tags) != 0 {
		t.Errorf("the deleted snapshot's template: %+v %v, want no tag", st, err)
	}
	for _, name := range []string{nodebuild.ArtifactName, nodebuild.SnapshotArtifactName} {
		if _, err := os.Stat(filepath.Join(p.local.Catalog.BuildDir(snapReq.BuildID), name)); !os.IsNotExist(err) {
			t.Errorf("%s of the deleted snapshot: %v", name, err)
		}
	}
	if _, err := p.node.Resolve(ctx, "team-a", nodeapi.Template{ID: snapReq.TemplateID, BuildID: snapReq.BuildID}); err == nil {
		t.Error("the deleted snapshot still resolves")
	}
	if err := ss.DeleteSandboxSnapshot(ctx, snapReq.BuildID); !errdefs.IsNotFound(err) {
		t.Errorf("second delete: %v, want not found", err)
	}
	if err := ss.DeleteSandboxSnapshot(ctx, build.ID); !errdefs.IsNotFound(err) {
		t.Errorf("delete of a template's build: %v, want not found", err)
	}
}
