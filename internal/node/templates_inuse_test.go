package node_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// TestTemplatesInUse checks that every sandbox the agent keeps counts,
// whatever its state and whether List shows it, and that a killed one no
// longer does.
func TestTemplatesInUse(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a := e.start()
		withTemplate := func(build string) func(*nodeapi.CreateRequest) {
			return func(r *nodeapi.CreateRequest) {
				r.Template.BuildID = build
				r.Template.RootFS = "/t/" + build + "/rootfs"
				r.Template.SnapshotDir = ""
			}
		}
		e.create(a, "running1", withTemplate("b-running"))
		e.create(a, "paused01", withTemplate("b-paused"))
		if _, err := a.Pause(ctx, "paused01", nodeapi.PauseRequest{Memory: true}); err != nil {
			t.Fatal(err)
		}
		pool := createReq("x").Template
		pool.ID, pool.BuildID, pool.RootFS = "pooled", "b-pool", "/t/b-pool/rootfs"
		if err := a.SetPool(ctx, pool, createReq("x").Resources, 1); err != nil {
			t.Fatal(err)
		}
		waitPool(t, a, "pooled", 1)

		got := map[string]bool{}
		var held []nodeapi.TemplateUse
		a.HoldTemplates(func(in []nodeapi.TemplateUse) { held = in })
		for _, u := range held {
			got[u.RootFS] = true
			if u.SnapshotDir != "" {
				got[u.SnapshotDir] = true
			}
		}
		for _, want := range []string{"/t/b-running/rootfs", "/t/b-paused/rootfs", "/t/b-pool/rootfs"} {
			if !got[want] {
				t.Errorf("%s not in use: %+v", want, held)
			}
		}
		if l, _ := a.List(ctx); len(l) != 2 {
			t.Errorf("List shows %d sandboxes, want 2 (pool members are left out)", len(l))
		}

		if err := a.Kill(ctx, "paused01", ""); err != nil {
			t.Fatal(err)
		}
		inUse, err := a.TemplatesInUse(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range inUse {
			if u.BuildID == "b-paused" {
				t.Errorf("killed sandbox's template still in use: %+v", u)
			}
		}
	})
}
