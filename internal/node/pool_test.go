package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// waitPool advances time until tmpl's pool has want ready members.
func waitPool(t *testing.T, a *node.Agent, tmpl string, want int) {
	t.Helper()
	for range 60 {
		time.Sleep(time.Second)
		synctest.Wait()
		if a.Pools()[tmpl].Ready == want {
			return
		}
	}
	t.Fatalf("pool %s: %+v, want %d ready within 60 s", tmpl, a.Pools()[tmpl], want)
}

func TestWarmPoolClaim(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a := e.start()
		req := createReq("ignored")
		res := req.Resources
		if err := a.SetPool(ctx, req.Template, res, 2); err != nil {
			t.Fatal(err)
		}
		waitPool(t, a, "tmpl", 2)
		if l, _ := a.List(ctx); len(l) != 0 {
			t.Errorf("pool members listed: %+v", l)
		}
		// Members wait running (a claim has no thaw to wait for), with the
		// API's default network policy.
		for _, id := range runtimeIDs(t, e) {
			if st, _ := e.drv.Status(ctx, id); st.State != driver.StateRunning {
				t.Errorf("pool member %s is %s, want running", id, st.State)
			}
			if p, _ := e.net.Policy(id); !p.Internet {
				t.Errorf("pool member %s has network policy %+v, want internet on", id, p)
			}
			// Made in the background, then given the default weight back.
			cg, _ := e.cg.Get(sandbox.HostName(id))
			if w := cg.CPUWeights(); !slices.Equal(w, []int{1, cgroup.DefaultCPUWeight}) {
				t.Errorf("pool member %s CPU weights %v, want 1 while made, then the default", id, w)
			}
		}
		// Not probed while in the pool.
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(e.envd.Probes()); n != 0 {
			t.Errorf("pool members probed %d times", n)
		}

		id, ok := a.Reserve(req.Template, res)
		if !ok {
			t.Fatal("no member reserved from a full pool")
		}
		req.ID = id
		req.EnvdAccessToken = "claimed-token"
		req.Metadata = map[string]string{"claimed": "yes"}
		sb, err := a.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if sb.ID != id || sb.State != sandbox.StateRunning || sb.TeamID != "team1" || sb.Metadata["claimed"] != "yes" {
			t.Errorf("claimed sandbox %+v", sb)
		}
		if st, _ := e.drv.Status(ctx, id); st.State != driver.StateRunning {
			t.Errorf("claimed member is %s in the runtime, want running", st.State)
		}
		inits := e.envd.Inits()
		last := inits[len(inits)-1]
		if last.Addr != sb.Address || last.Init.AccessToken != "claimed-token" || last.Init.EnvVars["B"] != "create" {
			t.Errorf("claim's /init %+v, want the create's token and env at %s", last, sb.Address)
		}
		if l, _ := a.List(ctx); len(l) != 1 || l[0].ID != id {
			t.Errorf("list after the claim: %+v", l)
		}
		if p, _ := e.net.Policy(id); p.Internet {
			t.Errorf("claimed sandbox's network policy %+v, want the create's (internet off)", p)
		}
		if n := len(e.fake.CallsOf("thaw")); n != 0 {
			t.Errorf("%d thaws for a claim, want none", n)
		}
		e.create(a, "user-sbx")
		if cg, _ := e.cg.Get(sandbox.HostName("user-sbx")); len(cg.CPUWeights()) != 0 {
			t.Errorf("a user sandbox's CPU weights %v, want none set", cg.CPUWeights())
		}

		// The pool refills.
		waitPool(t, a, "tmpl", 2)

		// A claimed member is an ordinary started sandbox: probed...
		time.Sleep(41 * time.Second)
		synctest.Wait()
		if n := countAddr(e.envd.Probes(), sb.Address); n == 0 {
			t.Error("claimed sandbox not probed")
		}
		if h := health(t, a, id); h != nodeapi.HealthHealthy {
			t.Errorf("claimed sandbox health %q", h)
		}
		// ...pausable and resumable...
		if _, err := a.Pause(ctx, id, nodeapi.PauseRequest{Memory: true}); err != nil {
			t.Fatalf("pause claimed sandbox: %v", err)
		}
		if _, err := a.Resume(ctx, id, nodeapi.ResumeRequest{}); err != nil {
			t.Fatalf("resume claimed sandbox: %v", err)
		}
		// ...and killable.
		events, _ := a.Watch(t.Context())
		if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
		if ev := nextEvent(t, events); ev.SandboxID != id || ev.Type != nodeapi.EventKilled {
			t.Errorf("kill event %+v", ev)
		}
		e.assertNoHostObjects(id)

		if v := gauge(t, e.reg, "sandbox_pool_claims_total", "result", "hit"); v != 1 {
			t.Errorf("pool hits %v, want 1", v)
		}
		other := req.Template
		other.ID = "other"
		if _, ok := a.Reserve(other, res); ok {
			t.Error("reserved from a template without a pool")
		}
		if v := gauge(t, e.reg, "sandbox_pool_claims_total", "result", "miss"); v != 1 {
			t.Errorf("pool misses %v, want 1", v)
		}
	})
}

func TestWarmPoolShrinks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		// Each member takes 10 s to start.
		e := newEnv(t, fake.Config{Default: fake.Behavior{StartDelay: 10 * time.Second}})
		e.tune = func(c *node.Config) { c.PoolConcurrency = 1 }
		a := e.start()
		tmpl := createReq("x").Template
		if err := a.SetPool(ctx, tmpl, sandbox.Resources{}, 3); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st := a.Pools()["tmpl"]; st.Making != 1 || st.Ready != 0 {
			t.Errorf("pool %+v: want 1 member being made at once (limit 1)", st)
		}
		waitPool(t, a, "tmpl", 3)
		old := runtimeIDs(t, e)

		// A new build of the template replaces every member.
		tmpl.BuildID = "build2"
		if err := a.SetPool(ctx, tmpl, sandbox.Resources{}, 1); err != nil {
			t.Fatal(err)
		}
		for _, id := range old {
			e.assertNoHostObjects(id)
		}
		waitPool(t, a, "tmpl", 1)
		if st := a.Pools()["tmpl"]; st.BuildID != "build2" {
			t.Errorf("pool %+v, want build2", st)
		}
		if err := a.SetPool(ctx, tmpl, sandbox.Resources{}, 0); err != nil {
			t.Fatal(err)
		}
		if _, ok := a.Pools()["tmpl"]; ok {
			t.Error("pool of size 0 still there")
		}
		if ids := runtimeIDs(t, e); len(ids) != 0 {
			t.Errorf("runtime sandboxes left after the pool went: %v", ids)
		}
	})
}

func runtimeIDs(t *testing.T, e *env) []string {
	t.Helper()
	ids, err := e.drv.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestWarmPoolSurvivesRestart: a pool's configuration outlives the agent
// (no in-memory-only state); the new agent refills it, and a pool removed
// before the restart stays removed.
func TestWarmPoolSurvivesRestart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a1 := e.start()
		req := createReq("ignored")
		if err := a1.SetPool(ctx, req.Template, req.Resources, 2); err != nil {
			t.Fatal(err)
		}
		gone := req.Template
		gone.ID = "gone"
		if err := a1.SetPool(ctx, gone, req.Resources, 1); err != nil {
			t.Fatal(err)
		}
		if err := a1.SetPool(ctx, gone, req.Resources, 0); err != nil {
			t.Fatal(err)
		}
		waitPool(t, a1, "tmpl", 2)
		a1.Close()

		a2 := e.start()
		st, ok := a2.Pools()["tmpl"]
		if !ok || st.Size != 2 || st.BuildID != "build1" {
			t.Fatalf("pools after restart: %+v, want tmpl of size 2", a2.Pools())
		}
		if _, ok := a2.Pools()["gone"]; ok {
			t.Fatalf("a removed pool came back: %+v", a2.Pools())
		}
		waitPool(t, a2, "tmpl", 2)
		if id, ok := a2.Reserve(req.Template, req.Resources); !ok || id == "" {
			t.Fatal("no member reserved from the restored pool")
		}
	})
}

// TestWarmPoolMembersGoAtClose: a graceful Close destroys the pool's
// members, ready and reserved alike, and keeps the configuration for the
// next agent; an ordinary sandbox keeps running for it to adopt.
func TestWarmPoolMembersGoAtClose(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a := e.start()
		req := createReq("ignored")
		if err := a.SetPool(ctx, req.Template, req.Resources, 2); err != nil {
			t.Fatal(err)
		}
		waitPool(t, a, "tmpl", 2)
		if _, ok := a.Reserve(req.Template, req.Resources); !ok {
			t.Fatal("no member reserved from a full pool")
		}
		other := req.Resources
		other.DiskMB = 999
		if _, ok := a.Reserve(req.Template, other); ok {
			t.Fatal("a member reserved for other resources")
		}
		if st := a.Pools()["tmpl"]; st.Hits != 1 || st.Misses != 1 {
			t.Errorf("pool counts %+v, want 1 hit and 1 miss", st)
		}
		e.create(a, "kept")
		if n := len(runtimeIDs(t, e)); n != 3 {
			t.Fatalf("%d runtime sandboxes before close, want 2 members + 1", n)
		}
		a.Close()
		if ids := runtimeIDs(t, e); len(ids) != 1 || ids[0] != "kept" {
			t.Fatalf("runtime sandboxes after close: %v, want only the ordinary one", ids)
		}
		a2 := e.start()
		if st := a2.Pools()["tmpl"]; st.Size != 2 {
			t.Fatalf("pool after restart: %+v, want size 2 kept", st)
		}
	})
}

// TestWarmPoolClaimResizes: a member serves a create of its template with
// other CPUs, another task limit and more memory: the claim sets the
// cgroup's limits and the driver's (Resize) to the create's and sends the
// create's task limit in /init; the member's boot memory stays in its
// spec after a pause and resume (the mounts sized from it must match the
// image). A create of less memory or another disk size is a miss.
func TestWarmPoolClaimResizes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a := e.start()
		req := createReq("ignored")
		req.Resources = sandbox.Resources{VCPUs: 1, MemoryMB: 256, DiskMB: 512, Pids: 1024}
		if err := a.SetPool(ctx, req.Template, req.Resources, 2); err != nil {
			t.Fatal(err)
		}
		waitPool(t, a, "tmpl", 2)

		for _, other := range []sandbox.Resources{
			{VCPUs: 1, MemoryMB: 128, DiskMB: 512, Pids: 1024},
			{VCPUs: 1, MemoryMB: 256, DiskMB: 1024, Pids: 1024},
		} {
			if id, ok := a.Reserve(req.Template, other); ok {
				t.Errorf("member %s reserved for %+v from a pool of %+v", id, other, req.Resources)
			}
		}

		want := sandbox.Resources{VCPUs: 2, MemoryMB: 512, DiskMB: 512, Pids: 100}
		id, ok := a.Reserve(req.Template, want)
		if !ok {
			t.Fatalf("no member reserved for %+v", want)
		}
		req.ID, req.Resources = id, want
		sb, err := a.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Resources != want {
			t.Errorf("claimed sandbox's resources %+v, want %+v", sb.Resources, want)
		}
		cg, ok := e.cg.Get(sandbox.HostName(id))
		if !ok {
			t.Fatal("claimed sandbox has no cgroup")
		}
		if got := cg.Resources(); got != want {
			t.Errorf("cgroup limits %+v, want %+v", got, want)
		}
		if got, _ := e.fake.Limits(id); got != want {
			t.Errorf("driver limits %+v, want %+v (Resize)", got, want)
		}
		inits := e.envd.Inits()
		if last := inits[len(inits)-1]; last.Addr != sb.Address || last.Init.TasksLimit != 100 {
			t.Errorf("claim's /init %+v, want tasks limit 100 at %s", last, sb.Address)
		}
		// The resources last: a pause and resume keeps them.
		if _, err := a.Pause(ctx, id, nodeapi.PauseRequest{Memory: true}); err != nil {
			t.Fatal(err)
		}
		rs, err := a.Resume(ctx, id, nodeapi.ResumeRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := e.fake.Limits(id); rs.Resources != want || got != want {
			t.Errorf("after resume: resources %+v, driver limits %+v, want %+v", rs.Resources, got, want)
		}
		if spec, _ := e.fake.Spec(id); spec.GuestMemoryMB != 256 || spec.Resources != want {
			t.Errorf("resumed spec: guest memory %d MiB, resources %+v; want the member's 256 MiB and %+v", spec.GuestMemoryMB, spec.Resources, want)
		}
		// A filesystem-only pause boots afresh at resume: all the create's.
		if _, err := a.Pause(ctx, id, nodeapi.PauseRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Resume(ctx, id, nodeapi.ResumeRequest{}); err != nil {
			t.Fatal(err)
		}
		if spec, _ := e.fake.Spec(id); spec.GuestMemoryMB != 0 {
			t.Errorf("spec after a fresh boot: guest memory %d MiB, want 0 (the create's)", spec.GuestMemoryMB)
		}
	})
}

// TestWarmPoolFollowsRebuild: a create that asks for a new build of a
// pooled template misses, and the pool switches to that build by itself:
// the old build's members go, new ones are made, the next create of the
// new build claims one, and the new build is what a restarted agent sets.
func TestWarmPoolFollowsRebuild(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a := e.start()
		req := createReq("ignored")
		if err := a.SetPool(ctx, req.Template, req.Resources, 2); err != nil {
			t.Fatal(err)
		}
		waitPool(t, a, "tmpl", 2)
		old := runtimeIDs(t, e)

		rebuilt := req.Template
		rebuilt.BuildID, rebuilt.RootFS = "build2", "/templates/tmpl/build2/rootfs"
		if id, ok := a.Reserve(rebuilt, req.Resources); ok {
			t.Fatalf("member %s of build1 reserved for build2", id)
		}
		waitPool(t, a, "tmpl", 2)
		if st := a.Pools()["tmpl"]; st.BuildID != "build2" {
			t.Fatalf("pool %+v, want it on build2", st)
		}
		for _, id := range old {
			e.assertNoHostObjects(id)
		}
		id, ok := a.Reserve(rebuilt, req.Resources)
		if !ok {
			t.Fatal("no member of build2 reserved")
		}
		if spec, _ := e.fake.Spec(id); spec.RootFS == "" {
			t.Errorf("member %s has no root filesystem in its spec", id)
		}
		if l, _ := e.layers.Get(id); l.Lower != rebuilt.RootFS {
			t.Errorf("member %s's layer is over %q, want build2's %q", id, l.Lower, rebuilt.RootFS)
		}
		a.Close()
		a2 := e.start()
		if st := a2.Pools()["tmpl"]; st.BuildID != "build2" || st.Size != 2 {
			t.Errorf("pool after restart %+v, want build2 of size 2", st)
		}
	})
}

// TestWarmPoolClaimsFirst: no refill starts while a claim is in flight
// (here held in its /init), and one starts once it is done; a claim whose
// network policy is the members' (internet on) updates no network.
func TestWarmPoolClaimsFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a := e.start()
		req := createReq("ignored")
		req.Network = netslot.Policy{Internet: true}
		if err := a.SetPool(ctx, req.Template, req.Resources, 2); err != nil {
			t.Fatal(err)
		}
		waitPool(t, a, "tmpl", 2)
		updates := e.net.Updates()

		hold, held := make(chan struct{}), make(chan struct{})
		e.envd.InitFunc = func(ctx context.Context, addr string, init node.EnvdInit) {
			if init.AccessToken == "held" {
				close(held)
				<-hold
			}
		}
		id, ok := a.Reserve(req.Template, req.Resources)
		if !ok {
			t.Fatal("no member reserved")
		}
		req.ID, req.EnvdAccessToken = id, "held"
		done := make(chan error, 1)
		go func() {
			_, err := a.Create(ctx, req)
			done <- err
		}()
		<-held
		time.Sleep(10 * time.Second) // ten pool ticks
		synctest.Wait()
		if st := a.Pools()["tmpl"]; st.Making != 0 || st.Ready != 1 {
			t.Errorf("pool %+v while a claim is in flight: want no member being made", st)
		}
		close(hold)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		waitPool(t, a, "tmpl", 2)
		if n := e.net.Updates() - updates; n != 0 {
			t.Errorf("%d network updates for a claim with the members' policy, want none", n)
		}
	})
}

// TestWarmPoolFollowsRebuildWhileMaking: a switch to a new build while a
// member of the old one is being made: that member is dropped when it is
// done, and the pool still fills with the new build (the member being
// made no longer counts against the pool's size).
func TestWarmPoolFollowsRebuildWhileMaking(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{Default: fake.Behavior{StartDelay: 10 * time.Second}})
		e.tune = func(c *node.Config) { c.PoolConcurrency = 1 }
		a := e.start()
		req := createReq("ignored")
		if err := a.SetPool(ctx, req.Template, req.Resources, 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st := a.Pools()["tmpl"]; st.Making != 1 {
			t.Fatalf("pool %+v, want a member being made", st)
		}
		rebuilt := req.Template
		rebuilt.BuildID = "build2"
		if _, ok := a.Reserve(rebuilt, req.Resources); ok {
			t.Fatal("reserved a member for build2 from a pool of build1")
		}
		waitPool(t, a, "tmpl", 1)
		if st := a.Pools()["tmpl"]; st.BuildID != "build2" || st.Making != 0 {
			t.Errorf("pool %+v, want build2 with none being made", st)
		}
		if ids := runtimeIDs(t, e); len(ids) != 1 {
			t.Errorf("runtime sandboxes %v, want the one member of build2", ids)
		}
	})
}

// TestWarmPoolClaimRecord: the state record a claim writes beside its
// /init is the claimed sandbox's (a user sandbox of the create's team,
// execution and token, ending Timeout after the claim), so an agent that
// starts after it adopts the sandbox as claimed.
func TestWarmPoolClaimRecord(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		a1 := e.start()
		req := createReq("ignored")
		if err := a1.SetPool(ctx, req.Template, req.Resources, 1); err != nil {
			t.Fatal(err)
		}
		waitPool(t, a1, "tmpl", 1)
		id, ok := a1.Reserve(req.Template, req.Resources)
		if !ok {
			t.Fatal("no member reserved from a full pool")
		}
		req.ID, req.ExecutionID, req.Timeout = id, "exec-claimed", 10*time.Minute
		before := time.Now()
		sb, err := a1.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if want := before.Add(10 * time.Minute); !sb.EndAt.Equal(want) {
			t.Errorf("claimed sandbox ends %v, want %v (claim + timeout)", sb.EndAt, want)
		}
		b, err := os.ReadFile(filepath.Join(e.dir, "sandboxes", sandbox.HostName(id), "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			ExecutionID, TeamID, AccessToken string
			EndAt                            time.Time
			Internal                         bool
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Internal || rec.ExecutionID != "exec-claimed" || rec.TeamID != "team1" || rec.AccessToken != req.EnvdAccessToken || !rec.EndAt.Equal(sb.EndAt) {
			t.Errorf("state record after the claim: %s", b)
		}
		a1.Close() // a claimed member is an ordinary sandbox: it stays

		a2 := e.start()
		got, err := a2.Get(ctx, id)
		if err != nil {
			t.Fatalf("claimed sandbox after a restart: %v", err)
		}
		if got.ExecutionID != "exec-claimed" || got.TeamID != "team1" || !got.EndAt.Equal(sb.EndAt) || got.State != sandbox.StateRunning {
			t.Errorf("claimed sandbox adopted as %+v", got)
		}
	})
}

// TestWarmPoolClaimInitFails: a claim whose /init fails has written its
// record already; the member is destroyed with it and the create starts
// a sandbox of that ID the usual way, whose record is then the one on disk.
func TestWarmPoolClaimInitFails(t *testing.T) {
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
		if err := a.SetPool(ctx, req.Template, req.Resources, 0); err != nil {
			t.Fatal(err) // no refill beside the claim
		}
		calls := 0
		e.envd.InitFunc = func(context.Context, string, node.EnvdInit) {
			calls++
			if calls == 1 { // the claim's
				e.envd.SetErrors(nil, errors.New("init refused"), nil)
			} else {
				e.envd.SetErrors(nil, nil, nil)
			}
		}
		starts := len(e.fake.CallsOf("start"))
		req.ID, req.ExecutionID = id, "exec-cold"
		sb, err := a.Create(ctx, req)
		if err != nil {
			t.Fatalf("create after a failed claim: %v", err)
		}
		if calls != 2 || len(e.fake.CallsOf("start")) != starts+1 {
			t.Errorf("%d inits and %d starts, want the claim's and a cold start's", calls, len(e.fake.CallsOf("start"))-starts)
		}
		b, err := os.ReadFile(filepath.Join(e.dir, "sandboxes", sandbox.HostName(id), "state.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			ExecutionID string
			Epoch       int64
			Internal    bool
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Internal || rec.ExecutionID != "exec-cold" || rec.Epoch != sb.Epoch {
			t.Errorf("state record after the cold start: %s (sandbox %+v)", b, sb)
		}
	})
}
