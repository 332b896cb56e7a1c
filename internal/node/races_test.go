package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/nodetest"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// exitOnSignal is the fake driver whose Wait of sandbox id answers that
// its init exited once exit is closed.
type exitOnSignal struct {
	*fake.Driver
	id   string
	exit chan struct{}
}

func (d *exitOnSignal) Wait(ctx context.Context, id string) (driver.Exit, error) {
	if id != d.id {
		return d.Driver.Wait(ctx, id)
	}
	select {
	case <-d.exit:
		return driver.Exit{}, nil
	case <-ctx.Done():
		return driver.Exit{}, ctx.Err()
	}
}

// stallCgroups opens cgroup name as one whose PidsLimitHit closes exit
// and returns only once path is gone, polled: nothing the race detector
// counts as synchronisation orders the caller after what removed it.
type stallCgroups struct {
	*nodetest.Cgroups
	name, path string
	exit       chan struct{}
}

func (c *stallCgroups) Open(ctx context.Context, name string) (cgroup.Cgroup, error) {
	cg, err := c.Cgroups.Open(ctx, name)
	if err != nil || name != c.name {
		return cg, err
	}
	return &stallCgroup{Cgroup: cg, c: c}, nil
}

type stallCgroup struct {
	cgroup.Cgroup
	c *stallCgroups
}

func (g *stallCgroup) PidsLimitHit(ctx context.Context) (bool, error) {
	hit, err := g.Cgroup.PidsLimitHit(ctx)
	close(g.c.exit)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, serr := os.Stat(g.c.path); os.IsNotExist(serr) {
			break
		}
	}
	return hit, err
}

// TestRecoverRegistersUnderLock: the sandboxes recover adopts run their
// exit watchers and backstops at once, so a paused record read after them
// must join the agent's map under its lock. The test makes the adopted
// sandbox "arun" exit (its watcher takes it out of the map) while recover
// is still at a later record ("clost", stopped while the agent was away:
// recover asks its cgroup why), then reads the paused "zpaused". Under
// -race, the map write of a recover that takes no lock is reported against
// the watcher's delete (the agent's log is silent, so that its lock orders
// nothing). Seen failing with -race before recover registered under
// Agent.mu.
func TestRecoverRegistersUnderLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	ctx := context.Background()
	a1 := e.start()
	for _, id := range []string{"arun", "clost", "zpaused"} {
		e.create(a1, id)
	}
	if _, err := a1.Pause(ctx, "zpaused", nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatal(err)
	}
	a1.Close()
	_ = e.fake.Kill(ctx, "clost")
	if err := e.fake.Delete(ctx, "clost"); err != nil {
		t.Fatal(err)
	}

	exit := make(chan struct{})
	cfg := e.config()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Driver = &exitOnSignal{Driver: e.fake, id: "arun", exit: exit}
	cfg.Cgroups = &stallCgroups{Cgroups: e.cg, name: sandbox.HostName("clost"), path: filepath.Join(e.dir, "sandboxes", sandbox.HostName("arun")), exit: exit}
	a2, err := node.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	if _, err := a2.Get(ctx, "arun"); err == nil {
		t.Error("the adopted sandbox that exited is still known")
	}
	if sb, err := a2.Get(ctx, "zpaused"); err != nil || sb.State != sandbox.StatePaused {
		t.Errorf("paused sandbox after recovery: %+v, %v", sb, err)
	}
}

// TestClaimedMemberExitHandled: a claimed warm pool member begins a new
// epoch, and the exit of its init in that epoch is handled as any
// sandbox's (an exited event, its host objects gone). Seen failing before
// the claim watched its new epoch: the member's watcher, of the epoch
// before the claim, dropped the exit as stale, and the sandbox stayed
// "running" with no container.
func TestClaimedMemberExitHandled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a := e.start()
		req := createReq("ignored")
		if err := a.SetPool(ctx, req.Template, req.Resources, 1); err != nil {
			t.Fatal(err)
		}
		waitPool(t, a, "tmpl", 1)
		id, ok := a.Reserve(req.Template, req.Resources)
		if !ok {
			t.Fatal("no member reserved from a full pool")
		}
		req.ID = id
		if _, err := a.Create(ctx, req); err != nil {
			t.Fatal(err)
		}
		events, _ := a.Watch(t.Context())
		if err := e.fake.Exit(id, 3); err != nil {
			t.Fatal(err)
		}
		ev := nextEvent(t, events)
		if ev.Type != nodeapi.EventExited || ev.SandboxID != id || ev.Reason != sandbox.KillExited {
			t.Fatalf("event %+v, want %s exited", ev, id)
		}
		e.assertNoHostObjects(id)
	})
}

// TestKeepPausedOperationsWaitForPreparation: the preparation of a kept
// sandbox goes on after its pause has answered, holding no lock; an
// operation that arrives meanwhile waits for it (on the keep's channel,
// which synctest sees as durably blocked) and then finds the prepared
// container: a resume restores into it, a kill removes it.
func TestKeepPausedOperationsWaitForPreparation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		op    func(a *node.Agent) error
		check func(t *testing.T, e *env, d *preparingDriver)
	}{
		{"resume", func(a *node.Agent) error {
			_, err := a.Resume(context.Background(), "p1", nodeapi.ResumeRequest{})
			return err
		}, func(t *testing.T, e *env, d *preparingDriver) {
			if d.restores.Load() != 1 {
				t.Errorf("restores into the prepared container: %d, want 1", d.restores.Load())
			}
		}},
		{"kill", func(a *node.Agent) error {
			return a.Kill(context.Background(), "p1", sandbox.KillRequest)
		}, func(t *testing.T, e *env, d *preparingDriver) {
			e.assertNoHostObjects("p1")
			if d.isPrepared("p1") {
				t.Error("prepared container left after the kill")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				e, d, _ := keepEnv(t, nil)
				entered, release := make(chan struct{}), make(chan struct{})
				d.hold = func() {
					close(entered)
					<-release
				}
				a := e.start()
				e.create(a, "p1")
				e.pauseMem(a, "p1") // answers with the preparation to come
				<-entered
				done := make(chan error, 1)
				go func() { done <- tt.op(a) }()
				synctest.Wait()
				select {
				case err := <-done:
					t.Fatalf("%s answered (%v) while the preparation ran", tt.name, err)
				default:
				}
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				tt.check(t, e, d)
			})
		})
	}
}

// TestKeepPausedFailedPreparationHoldsOperations: a preparation that
// fails releases the kept host objects, and an operation that arrives
// while it does waits for the release to end, as for a preparation that
// succeeds. The test holds the release's network slot and resumes: the
// resume must not answer before the release ends, and then resumes the
// slow way into host objects of its own. Seen failing before the handle
// waited on its preparation rather than on its keep: the release had
// dropped the keep first, so the resume ran beside it (and the release
// then cleared the resumed sandbox's slot and cgroup from its record).
func TestKeepPausedFailedPreparationHoldsOperations(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		e, d, n := keepEnv(t, nil)
		d.prepareErr = errors.New("prepare refused")
		a := e.start()
		e.create(a, "p1")
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		n.holdRelease = func() {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		e.pauseMem(a, "p1") // answers; the preparation fails after
		<-entered
		done := make(chan error, 1)
		go func() {
			_, err := a.Resume(context.Background(), "p1", nodeapi.ResumeRequest{})
			done <- err
		}()
		synctest.Wait()
		select {
		case err := <-done:
			close(release)
			t.Fatalf("resume answered (%v) while the failed preparation released the kept objects", err)
		default:
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if d.restores.Load() != 0 {
			t.Errorf("restores into a prepared container: %d, want 0", d.restores.Load())
		}
		sb, err := a.Get(context.Background(), "p1")
		if err != nil || sb.State != sandbox.StateRunning || sb.Host == "" {
			t.Fatalf("resumed sandbox: %+v, %v", sb, err)
		}
		if slot, cg := e.holds("p1"); !slot || !cg {
			t.Errorf("resumed sandbox holds slot %v, cgroup %v; want both", slot, cg)
		}
	})
}

// TestOperationsConcurrentOnHandles is the handles' stress test: workers
// run every operation of the node contract at once, at random, over a
// few sandboxes (pauses with memory keep their host objects, so that
// preparations run beside the rest), forks included. An operation may be
// refused for the state the others left (conflict, not found, a
// checkpoint in flight), never fail otherwise; no operation waits
// forever; and afterwards every sandbox holds exactly the host objects
// its state says, and none once killed. Run under -race it checks that
// every piece of a handle's state is read under its lock.
func TestOperationsConcurrentOnHandles(t *testing.T) {
	t.Parallel()
	e, _, _ := keepEnv(t, func(c *node.Config) { c.KeepPaused = 2 })
	a := e.start()
	ctx := context.Background()
	ids := []string{"c0", "c1", "c2"}
	for _, id := range ids {
		e.create(a, id)
	}
	var mu sync.Mutex
	forks := map[string]bool{}
	refused := func(err error) bool {
		return err == nil || errdefs.IsConflict(err) || errdefs.IsNotFound(err) || errdefs.IsExhausted(err)
	}
	const workers, rounds = 6, 40
	errs := make(chan error, workers*rounds)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 27))
			for i := range rounds {
				id := ids[r.IntN(len(ids))]
				var err error
				var op string
				switch n := r.IntN(10); n {
				case 0, 1:
					op = "pause"
					_, err = a.Pause(ctx, id, nodeapi.PauseRequest{Memory: n == 0})
				case 2, 3:
					op = "resume"
					_, err = a.Resume(ctx, id, nodeapi.ResumeRequest{})
				case 4:
					op = "fork"
					cid := fmt.Sprintf("f%d-%d", w, i)
					_, err = a.Fork(ctx, id, nodeapi.ForkRequest{IDs: []string{cid}})
					if err == nil {
						mu.Lock()
						forks[cid] = true
						mu.Unlock()
					}
				case 5:
					op = "stats"
					_, err = a.Stats(ctx, id)
				case 6:
					op = "end time"
					err = a.SetEndTime(ctx, id, time.Now().Add(time.Hour))
				case 7:
					op = "network"
					err = a.UpdateNetwork(ctx, id, netslot.Policy{Internet: r.IntN(2) == 0})
				case 8:
					op = "kept"
					_, err = a.HostObjectsKept(id)
				default:
					op = "list"
					if _, err = a.List(ctx); err == nil {
						_, err = a.TemplatesInUse(ctx)
					}
					if err == nil {
						_, err = a.Metrics(ctx, id, time.Time{}, time.Time{})
					}
				}
				if !refused(err) {
					errs <- fmt.Errorf("%s %s: %w", op, id, err)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("operations still running after 5 minutes: a deadlock")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	all := append([]string{}, ids...)
	for id := range forks {
		all = append(all, id)
	}
	for _, id := range all {
		kept, err := a.HostObjectsKept(id) // waits for a preparation in flight
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		sb, err := a.Get(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		slot, cg := e.holds(id)
		switch {
		case sb.State == sandbox.StateRunning && (!slot || !cg || sb.Host == ""):
			t.Errorf("running %s holds slot %v, cgroup %v, host %q", id, slot, cg, sb.Host)
		case sb.State == sandbox.StatePaused && (slot != kept || cg != kept):
			t.Errorf("paused %s (kept %v) holds slot %v, cgroup %v", id, kept, slot, cg)
		case sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused:
			t.Errorf("%s is %s after the operations", id, sb.State)
		}
		if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
			t.Errorf("kill %s: %v", id, err)
		}
		e.assertNoHostObjects(id)
	}
}
