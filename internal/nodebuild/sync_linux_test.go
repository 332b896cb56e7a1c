package nodebuild_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/templates"
)

// TestSyncLetsGoWhatTheCatalogDropped: a node keeps its copies of the
// builds the control plane's catalog can still start, and lets its
// template collector free the others: a build superseded by a rebuild,
// one whose template was deleted; a build the catalog has not tagged yet
// stays.
func TestSyncLetsGoWhatTheCatalogDropped(t *testing.T) {
	t.Parallel()
	r, cat, _, srv := newRemote(t)
	ctx := context.Background()
	p := newPeer(t, (&nodebuild.Locator{APIURL: srv.URL, Token: token}).Locate)
	// Builds of the control plane: old (superseded by current), current,
	// fresh (ready, its tag not set yet), and gone (template deleted).
	ready := func(name string, tag bool) (*templates.Template, *templates.Build) {
		t.Helper()
		tm, b, err := r.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if tag {
			b, err = cat.FinishBuild(ctx, b.ID, nil)
		} else {
			b, err = cat.UpdateBuild(ctx, b.ID, func(b *templates.Build) error {
				b.Status, b.FinishedAt = templates.BuildReady, time.Now()
				return nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
		tm, err = cat.Store().GetTemplate(ctx, tm.ID)
		if err != nil {
			t.Fatal(err)
		}
		return tm, b
	}
	_, old := ready("app", true)
	tm, current := ready("app", true)
	ftm, fresh := ready("fresh", false)
	gtm, gone := ready("gone", true)
	must(t, cat.Delete(ctx, "team-a", "gone"))
	// The node holds a copy of each, tagged.
	for _, c := range []struct {
		t *templates.Template
		b *templates.Build
	}{{tm, old}, {tm, current}, {ftm, fresh}, {gtm, gone}} {
		b := *c.b
		b.RootFSDir = filepath.Join(p.local.Catalog.BuildDir(b.ID), "rootfs")
		must(t, os.MkdirAll(b.RootFSDir, 0o755))
		must(t, p.local.Catalog.Mirror(ctx, c.t, &b))
		_, err := p.local.Catalog.Store().UpdateTemplate(ctx, c.t.ID, func(t *templates.Template) error {
			t.Tags[b.ID] = templates.Tag{BuildID: b.ID}
			return nil
		})
		must(t, err)
	}
	must(t, p.node.Sync(ctx))
	plan, err := p.local.Catalog.PlanGC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var freed []string
	for _, c := range plan.Candidates {
		freed = append(freed, c.BuildID)
	}
	slices.Sort(freed)
	want := []string{old.ID, gone.ID}
	slices.Sort(want)
	if !slices.Equal(freed, want) {
		t.Fatalf("collector candidates after a sync = %v, want the superseded %s and the deleted %s (kept: current %s, fresh %s)",
			freed, old.ID, gone.ID, current.ID, fresh.ID)
	}
	held, err := p.local.Catalog.HeldBuilds(ctx)
	if err != nil || len(held) != 4 {
		t.Fatalf("HeldBuilds = %v, %v: a sync frees no files itself", held, err)
	}
}
