package lifecycle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// TestRefusedPauseNoBackstopKill runs docs/lifecycle.md §2 and §3 together:
// the control plane over the real node agent (fake runtime driver). The
// node refuses memory pauses (disk low); the control plane retries every
// 10 s and degrades to a filesystem-only pause after the overstay budget;
// meanwhile the node's backstop, whose grace (30 s) is far shorter than the
// budget (120 s), must not fire, because every refusal pushes it forward.
func TestRefusedPauseNoBackstopKill(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var lowDisk atomic.Bool
		lowDisk.Store(true)
		drv := fake.New(fake.Config{})
		agent, err := node.New(ctx, node.Config{
			DataDir: t.TempDir(), Driver: drv, Cgroups: nodetest.NewCgroups(), Net: nodetest.NewNet(),
			Layers: nodetest.NewLayers(), Envd: &nodetest.Envd{}, EnvdPath: "/usr/local/bin/envd",
			ReclaimInterval: -1, BackstopGrace: 30 * time.Second, MinFreeDiskBytes: 1 << 30,
			FreeDisk: func(string) (uint64, error) {
				if lowDisk.Load() {
					return 1 << 20, nil
				}
				return 100 << 30, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer agent.Close()
		st := storetest.SQLite(t)
		m, err := lifecycle.New(lifecycle.Config{Store: st, Node: agent, PauseRetry: 10 * time.Second, PauseOverstay: 120 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- m.Run(runCtx) }()
		defer func() { cancel(); <-done }()
		synctest.Wait()

		sb, err := m.Create(ctx, lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base", RootFS: "/templates/base"},
			Timeout: 10 * time.Second, AutoPause: true, AutoPauseMemory: true, Resources: sandbox.Resources{VCPUs: 1, MemoryMB: 256}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		refusals := func() int {
			evs, _ := st.QueryEvents(ctx, store.EventFilter{SandboxID: sb.ID, Types: []string{store.EventPauseRefused}})
			return len(evs)
		}
		// Refused at 10 s, then every 10 s until the budget runs out at 130 s.
		for _, at := range []time.Duration{10, 20, 50, 129} {
			time.Sleep(time.Until(start.Add(at*time.Second + time.Millisecond)))
			synctest.Wait()
			got, err := st.GetSandbox(ctx, sb.ID)
			if err != nil || got.State != sandbox.StateRunning {
				t.Fatalf("at %v: state %v (%v), want running while the pause is refused", at*time.Second, got.State, err)
			}
			if want := int(at) / 10; refusals() != want {
				t.Fatalf("at %v: %d refusals, want %d (one every 10 s)", at*time.Second, refusals(), want)
			}
			if ns, err := agent.Get(ctx, sb.ID); err != nil || ns.State != sandbox.StateRunning {
				t.Fatalf("at %v: node has %+v, %v: the backstop killed a sandbox the control plane is pausing", at*time.Second, ns, err)
			}
		}
		time.Sleep(time.Until(start.Add(131 * time.Second)))
		synctest.Wait()
		got, _ := st.GetSandbox(ctx, sb.ID)
		if got.State != sandbox.StatePaused || got.Spec.PausedWithMemory {
			t.Fatalf("after the budget: state %s memory %t, want a filesystem-only pause", got.State, got.Spec.PausedWithMemory)
		}
		evs, _ := st.ListEvents(ctx, sb.ID)
		for _, e := range evs {
			if e.Type == store.EventKilled {
				t.Fatalf("killed event %+v", e)
			}
		}
	})
}
