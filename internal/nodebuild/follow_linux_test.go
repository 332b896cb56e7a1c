package nodebuild_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/internal/templates"
)

// TestReplicasFollowABuild: two replicas of warren api over one Postgres
// follow a build running on a node (as after the replica that started it
// stopped: Resume); the catalog gets the node's log once, then the end of
// the build with its artifact's digest and its tags.
func TestReplicasFollowABuild(t *testing.T) {
	t.Parallel()
	dsn := storetest.PostgresSchema(t)
	ctx := context.Background()
	p := newPeer(t, nil)
	var remotes []*nodebuild.Remote
	var cat *templates.Catalog
	for range 2 {
		st := storetest.OpenPostgres(t, dsn)
		c, err := templates.New(templates.Config{Store: st.Templates()})
		if err != nil {
			t.Fatal(err)
		}
		r, err := nodebuild.NewRemote(remoteConfig(nodebuild.RemoteConfig{Catalog: c, Nodes: st, PollInterval: 20 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		remotes, cat = append(remotes, r), c
		heartbeat(t, st, "n-1", p.srv.URL)
	}
	tm, b, err := remotes[0].CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	// The build runs on n-1: the node's copy is building, with a log.
	waiting := *b
	if _, err := cat.UpdateBuild(ctx, b.ID, func(b *templates.Build) error {
		b.Status, b.NodeID = templates.BuildBuilding, "n-1"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	must(t, p.local.Catalog.Mirror(ctx, tm, &waiting))
	nodeLog := p.local.Catalog.Store()
	for _, m := range []string{"one", "two"} {
		must(t, nodeLog.AppendLogs(ctx, b.ID, templates.LogEntry{Level: templates.LogInfo, Message: m, Step: "1"}))
	}
	for _, r := range remotes {
		must(t, r.Resume(ctx))
	}
	waitFor(t, "the first lines copied", func() bool {
		logs, _ := cat.Store().Logs(ctx, b.ID, 0)
		return len(logs) == 2
	})
	must(t, nodeLog.AppendLogs(ctx, b.ID, templates.LogEntry{Level: templates.LogInfo, Message: "three"}))
	rootfs := filepath.Join(p.local.Catalog.BuildDir(b.ID), "rootfs")
	must(t, os.MkdirAll(rootfs, 0o755))
	must(t, os.WriteFile(filepath.Join(rootfs, "hi"), []byte("hi\n"), 0o644))
	if _, err := p.local.Catalog.UpdateBuild(ctx, b.ID, func(nb *templates.Build) error {
		nb.RootFSDir, nb.Env, nb.User = rootfs, map[string]string{"K": "v"}, "root"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.local.Catalog.FinishBuild(ctx, b.ID, nil); err != nil {
		t.Fatal(err)
	}
	// FinishBuild marks the build ready, then tags it.
	waitFor(t, "the build ready and tagged in the catalog", func() bool {
		got, err := cat.Build(ctx, b.ID)
		tm, terr := cat.Find(ctx, "team-a", "mine")
		return err == nil && got.Status == templates.BuildReady && terr == nil && tm.Tags[templates.DefaultTag].BuildID == b.ID
	})
	got, _ := cat.Build(ctx, b.ID)
	nb, _ := p.local.Catalog.Build(ctx, b.ID)
	if got.RootFSSHA256 == "" || got.RootFSSHA256 != nb.RootFSSHA256 || got.RootFSSize != nb.RootFSSize || got.NodeID != "n-1" ||
		got.Env["K"] != "v" || got.User != "root" || got.RootFSDir != "" {
		t.Fatalf("catalog's build = %+v; node's %+v", got, nb)
	}
	logs, err := cat.Store().Logs(ctx, b.ID, 0)
	if err != nil || len(logs) != 3 || logs[0].Message != "one" || logs[1].Message != "two" || logs[2].Message != "three" || logs[0].Step != "1" {
		t.Fatalf("catalog's log = %+v, %v; want one, two, three once", logs, err)
	}
	tmpl, err := cat.Find(ctx, "team-a", "mine")
	if err != nil || tmpl.Tags[templates.DefaultTag].BuildID != b.ID {
		t.Fatalf("template after the build = %+v, %v", tmpl, err)
	}
	// A create of it names the build, for placement and the node.
	nt, err := remotes[1].Resolve(ctx, "team-a", "mine")
	if err != nil || nt.BuildID != b.ID || nt.ID != tm.ID || nt.RootFS != "" || nt.User != "root" {
		t.Fatalf("Resolve = %+v, %v", nt, err)
	}
	if _, err := remotes[1].Resolve(ctx, "team-b", tm.ID); err == nil {
		t.Fatal("team-b resolved team-a's template by ID")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
