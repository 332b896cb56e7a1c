package templates

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestPlanGC checks which build directories the catalog gives up: an
// untagged ready build, a failed one and a deleted template's; not a
// tagged build, a build in progress, or a build whose tree a kept
// sandbox snapshot's build runs on.
func TestPlanGC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCatalog(t, Config{})
	mk := func(name string, finish bool, reason *Reason) *Build {
		t.Helper()
		_, b, err := c.CreateBuild(ctx, CreateRequest{TeamID: "team", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(c.BuildDir(b.ID), "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := c.UpdateBuild(ctx, b.ID, func(x *Build) error {
			x.RootFSDir = filepath.Join(c.BuildDir(b.ID), "rootfs")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if finish {
			if _, err := c.FinishBuild(ctx, b.ID, reason); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	old := mk("app", true, nil)
	cur := mk("app", true, nil) // the default tag moves here: old is superseded
	failed := mk("app", true, &Reason{Message: "boom"})
	building := mk("app", false, nil)
	src := mk("src", true, nil)
	src2 := mk("src", true, nil) // src is superseded, but a snapshot runs on its tree
	snap := mk("snap", false, nil)
	if _, err := c.UpdateBuild(ctx, snap.ID, func(x *Build) error { x.RootFSDir = filepath.Join(c.BuildDir(src.ID), "rootfs"); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FinishBuild(ctx, snap.ID, nil); err != nil {
		t.Fatal(err)
	}
	gone := mk("gone", true, nil)
	if err := c.Delete(ctx, "team", "gone"); err != nil {
		t.Fatal(err)
	}

	plan, err := c.PlanGC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]GCReason{}
	for _, cd := range plan.Candidates {
		got[cd.BuildID] = cd.Reason
	}
	for _, tc := range []struct {
		name  string
		build *Build
		want  GCReason // "" means kept
	}{
		{"superseded", old, GCSuperseded},
		{"tagged", cur, ""},
		{"failed", failed, GCFailed},
		{"in progress", building, ""},
		{"tree of a snapshot build", src, ""},
		{"current of the snapshot's source", src2, ""},
		{"snapshot build", snap, ""},
		{"deleted template", gone, GCDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got[tc.build.ID] != tc.want {
				t.Errorf("build %s: %q, want %q", tc.build.ID, got[tc.build.ID], tc.want)
			}
		})
	}
	if !plan.Templates[cur.TemplateID] || plan.Templates[gone.TemplateID] {
		t.Errorf("templates %v", plan.Templates)
	}
}
