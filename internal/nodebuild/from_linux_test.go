package nodebuild_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/templates"
)

// TestBuildFromATeamTemplate: a build through warren api FROM a team's
// template runs on a node that lacks the parent build: the node pulls it
// first (from the node that built it, checked against its sha256, as for
// a create) and builds on its tree. Another team's build FROM that
// private template does not get it.
func TestBuildFromATeamTemplate(t *testing.T) {
	t.Parallel()
	r, cat, st, srv := newRemote(t)
	ctx := context.Background()
	holder := newPeer(t, nil)
	puller := newPeer(t, (&nodebuild.Locator{APIURL: srv.URL, Token: token}).Locate)

	// team-a's "parent", built on n-1 (cordoned: builds go to n-2).
	pt, pb, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(holder.local.Catalog.BuildDir(pb.ID), "rootfs")
	must(t, os.MkdirAll(rootfs, 0o755))
	must(t, os.WriteFile(filepath.Join(rootfs, "hi"), []byte("from the parent\n"), 0o644))
	nb := *pb
	nb.Status, nb.RootFSDir, nb.User, nb.Workdir = templates.BuildReady, rootfs, "user", "/home/user"
	must(t, holder.local.Catalog.Mirror(ctx, pt, &nb))
	exported, err := holder.node.Export(ctx, pb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.UpdateBuild(ctx, pb.ID, func(b *templates.Build) error {
		b.NodeID, b.RootFSSHA256, b.RootFSSize = "n-1", exported.RootFSSHA256, exported.RootFSSize
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.FinishBuild(ctx, pb.ID, nil); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, st, "n-1", holder.srv.URL, pb.ID)
	must(t, st.SetNodeAdminStatus(ctx, "n-1", store.NodeCordoned))
	heartbeat(t, st, "n-2", puller.srv.URL)

	build := func(team, from string) (*templates.Build, *templates.Build) {
		t.Helper()
		ct, cb, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: team, Name: "child"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.StartBuild(ctx, builder.StartRequest{TeamID: team, TemplateID: ct.ID, BuildID: cb.ID, Spec: builder.Spec{
			FromTemplate: from, Steps: []builder.Step{{Type: builder.StepEnv, Args: []string{"CHILD", "1"}}},
		}}); err != nil {
			t.Fatalf("%s's build FROM %s: %v", team, from, err)
		}
		var got *templates.Build
		waitFor(t, team+"'s build FROM "+from+" ended", func() bool {
			got, err = cat.Build(ctx, cb.ID)
			return err == nil && (got.Status == templates.BuildReady || got.Status == templates.BuildError)
		})
		onNode, err := puller.local.Catalog.Build(ctx, cb.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got, onNode
	}
	got, onNode := build("team-a", "parent")
	if got.Status != templates.BuildReady || got.NodeID != "n-2" {
		logs, _ := cat.Store().Logs(ctx, got.ID, 0)
		t.Fatalf("team-a's build FROM its template: %+v\nlog: %+v", got, logs)
	}
	if b, err := os.ReadFile(filepath.Join(onNode.RootFSDir, "hi")); err != nil || string(b) != "from the parent\n" {
		t.Fatalf("/hi in the child's tree = %q, %v; want the parent's", b, err)
	}
	if got.Env["CHILD"] != "1" {
		t.Errorf("the child's env = %v", got.Env)
	}
	if h := holder.rootfsHits.Load(); h != 1 {
		t.Errorf("%d artifact streams from the parent's holder, want 1", h)
	}
	if held, err := puller.local.Catalog.HeldBuilds(ctx); err != nil || !strings.Contains(strings.Join(held, ","), pb.ID) {
		t.Errorf("the build node's held builds = %v, %v; want the parent among them", held, err)
	}

	// With room on both, a build FROM the template goes to a node that
	// holds it (n-1 now has less free memory than n-2).
	must(t, st.SetNodeAdminStatus(ctx, "n-1", ""))
	if _, err := st.HeartbeatNode(ctx, &store.Node{ID: "n-1", RPCAddress: holder.srv.URL, ProxyAddress: "127.0.0.1:1", BootID: "b", Version: "v",
		Capacity: store.NodeResources{VCPUs: 8, MemoryMB: 4096}, Templates: []string{pb.ID}}); err != nil {
		t.Fatal(err)
	}
	ct, cb, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "child-2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.StartBuild(ctx, builder.StartRequest{TeamID: "team-a", TemplateID: ct.ID, BuildID: cb.ID, Spec: builder.Spec{FromTemplate: "parent:default"}}); err != nil {
		t.Fatal(err)
	}
	if b, err := cat.Build(ctx, cb.ID); err != nil || b.NodeID != "n-1" {
		t.Fatalf("a build FROM the template with room on both nodes: %+v, %v; want it on n-1, which holds the parent", b, err)
	}
	waitFor(t, "the second child build ended", func() bool {
		b, err := cat.Build(ctx, cb.ID)
		return err == nil && b.Status != templates.BuildBuilding
	})
	must(t, st.SetNodeAdminStatus(ctx, "n-1", store.NodeCordoned))

	// team-b may not use team-a's private template, by ID either.
	got, _ = build("team-b", pt.ID)
	if got.Status != templates.BuildError {
		t.Fatalf("team-b's build FROM team-a's private template: %+v, want failed", got)
	}
}
