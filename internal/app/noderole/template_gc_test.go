package noderole

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// TestTemplateGCWiring: serve's collector registers its counters beside
// the node's, runs, and stops; a negative interval disables the loop but
// keeps the counters.
func TestTemplateGCWiring(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		interval time.Duration
	}{{"hourly", 0}, {"disabled", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			log := testenv.Logger(t)
			local, err := builder.OpenLocal(builder.LocalConfig{DataDir: dir, Logger: log, NoNetwork: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(local.Service.Close)
			sys, err := app.New(app.Options{Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			reg := sys.Registry
			a, err := node.New(context.Background(), node.Config{
				DataDir: filepath.Join(dir, "node"), Driver: fake.New(fake.Config{}), Cgroups: nodetest.NewCgroups(),
				Net: nodetest.NewNet(), Layers: nodetest.NewLayers(), Envd: &nodetest.Envd{}, EnvdPath: "/envd",
				Registry: reg, Logger: log, ReclaimInterval: -1,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			if err := addTemplateGC(sys, Host{TemplateGCInterval: tc.interval}, local, a); err != nil {
				t.Fatal(err)
			}
			if err := sys.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := sys.Close(); err != nil {
				t.Fatal(err)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			found := map[string]bool{}
			for _, mf := range mfs {
				found[mf.GetName()] = true
			}
			for _, n := range []string{"template_gc_freed_bytes_total", "template_gc_freed_objects_total", "sandbox_leaked_objects_reclaimed_total"} {
				if !found[n] {
					t.Errorf("metric %s not registered", n)
				}
			}
		})
	}
}
