package node_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

func TestCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	sb := e.create(a, "sb1")

	if sb.State != sandbox.StateRunning || sb.Epoch != 1 || sb.ExecutionID != "exec-sb1" {
		t.Errorf("sandbox = %+v, want running, epoch 1, exec-sb1", sb)
	}
	if sb.Host == "" || sb.Address != sb.Host+":49983" {
		t.Errorf("host %q address %q, want <guest ip>:49983", sb.Host, sb.Address)
	}
	if sb.EnvdVersion != node.EnvdVersion || sb.TemplateID != "tmpl" || sb.BuildID != "build1" || sb.TeamID != "team1" {
		t.Errorf("sandbox = %+v", sb)
	}
	if sb.Resources.DiskMB != 1024 || sb.Resources.Pids != 1024 || sb.Resources.VCPUs != 1 {
		t.Errorf("resources %+v: defaults not applied", sb.Resources)
	}

	spec, ok := e.fake.Spec("sb1")
	if !ok {
		t.Fatal("driver has no sandbox sb1")
	}
	if !slices.ContainsFunc(spec.Mounts, func(m driver.Mount) bool {
		return m.Destination == "/.warren/envd" && m.ReadOnly && m.Source == "/usr/local/bin/envd"
	}) {
		t.Errorf("envd not mounted read-only: %+v", spec.Mounts)
	}
	if spec.Init.Args[0] != "/.warren/envd" || !slices.Contains(spec.Init.Args, "49983") {
		t.Errorf("init args %v", spec.Init.Args)
	}
	if !strings.HasPrefix(spec.NetNSPath, "/var/run/netns/sbx-sb1") || spec.CgroupParent != "/warren/sbx-sb1" || spec.RootFS != "/fake/rootfs/sbx-sb1" {
		t.Errorf("spec netns %q cgroup %q rootfs %q", spec.NetNSPath, spec.CgroupParent, spec.RootFS)
	}

	inits := e.envd.Inits()
	if len(inits) != 1 {
		t.Fatalf("%d envd inits, want 1", len(inits))
	}
	in := inits[0]
	sum := sha256.Sum256([]byte(in.InitToken))
	if i := slices.Index(spec.Init.Args, "--init-token-sha256"); i < 0 || spec.Init.Args[i+1] != hex.EncodeToString(sum[:]) {
		t.Errorf("init token %q does not match envd's --init-token-sha256 in %v", in.InitToken, spec.Init.Args)
	}
	if in.Addr != sb.Address || in.Init.AccessToken != "access-sb1" || in.Init.DefaultUser != "user" || in.Init.DefaultWorkdir != "/home/user" {
		t.Errorf("init = %+v", in)
	}
	if in.Init.EnvVars["A"] != "template" || in.Init.EnvVars["B"] != "create" {
		t.Errorf("env vars %v: create-time vars must override the template's", in.Init.EnvVars)
	}
	starts := e.envd.Starts()
	if len(starts) != 1 || starts[0].Process.Tag != "start-cmd" || !slices.Contains(starts[0].Process.Args, "python3 -m http.server") {
		t.Errorf("start command calls %+v", starts)
	}

	b, err := os.ReadFile(filepath.Join(e.dir, "sandboxes", "sbx-sb1", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"version": 1`) || !strings.Contains(string(b), `"state": "running"`) {
		t.Errorf("state record:\n%s", b)
	}
	if fi, err := os.Stat(filepath.Join(e.dir, "sandboxes", "sbx-sb1", "state.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state record mode %v, %v; want 0600", fi.Mode(), err)
	}

	got, err := a.Get(context.Background(), "sb1")
	if err != nil || got.Address != sb.Address {
		t.Errorf("Get = %+v, %v", got, err)
	}
	list, err := a.List(context.Background())
	if err != nil || len(list) != 1 || list[0].ID != "sb1" {
		t.Errorf("List = %+v, %v", list, err)
	}
}

func TestCreateErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name    string
		prep    func(e *env)
		mod     func(*nodeapi.CreateRequest)
		class   error
		creates bool // host objects may have been made (and must be undone)
	}{
		{name: "bad id", mod: func(r *nodeapi.CreateRequest) { r.ID = "Bad ID" }, class: errdefs.ErrInvalid},
		{name: "no rootfs", mod: func(r *nodeapi.CreateRequest) { r.Template.RootFS = "" }, class: errdefs.ErrInvalid},
		{name: "net", prep: func(e *env) { e.net.AcquireErr = boom }, class: boom, creates: true},
		{name: "layer", prep: func(e *env) { e.layers.CreateErr = boom }, class: boom, creates: true},
		{name: "driver start", prep: func(e *env) { e.fake.SetBehavior("sb1", fake.Behavior{StartErr: boom}) }, class: boom, creates: true},
		{name: "envd health", prep: func(e *env) { e.envd.SetErrors(boom, nil, nil) }, class: boom, creates: true},
		{name: "envd init", prep: func(e *env) { e.envd.SetErrors(nil, boom, nil) }, class: boom, creates: true},
		{name: "start command", prep: func(e *env) { e.envd.SetErrors(nil, nil, boom) }, class: boom, creates: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fake.Config{})
			a := e.start()
			if tt.prep != nil {
				tt.prep(e)
			}
			req := createReq("sb1")
			if tt.mod != nil {
				tt.mod(&req)
			}
			_, err := a.Create(context.Background(), req)
			if !errors.Is(err, tt.class) {
				t.Fatalf("Create error %v, want %v", err, tt.class)
			}
			e.assertNoHostObjects("sb1")
			if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", "sbx-sb1")); !os.IsNotExist(err) {
				t.Errorf("state dir left: %v", err)
			}
			if _, err := a.Get(context.Background(), "sb1"); !errdefs.IsNotFound(err) {
				t.Errorf("Get after failed create: %v, want not found", err)
			}
			// The same ID can be created once the cause is gone.
			e.net.AcquireErr, e.layers.CreateErr = nil, nil
			e.envd.SetErrors(nil, nil, nil)
			e.fake.SetBehavior("sb1", fake.Behavior{})
			if tt.creates {
				e.create(a, "sb1")
			}
		})
	}
}

func TestCreateDuplicate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	e.create(a, "sb1")
	if _, err := a.Create(context.Background(), createReq("sb1")); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("second create: %v, want already exists", err)
	}
	if _, err := a.Get(context.Background(), "sb1"); err != nil {
		t.Errorf("the first sandbox must survive a duplicate create: %v", err)
	}
}

func TestUnknownSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	ctx := context.Background()
	calls := map[string]func() error{
		"Get":           func() error { _, err := a.Get(ctx, "nope"); return err },
		"SetEndTime":    func() error { return a.SetEndTime(ctx, "nope", e.now()) },
		"UpdateNetwork": func() error { return a.UpdateNetwork(ctx, "nope", netslot.Policy{}) },
		"Pause":         func() error { _, err := a.Pause(ctx, "nope", nodeapi.PauseRequest{Memory: true}); return err },
		"Resume":        func() error { _, err := a.Resume(ctx, "nope", nodeapi.ResumeRequest{}); return err },
		"Fork":          func() error { _, err := a.Fork(ctx, "nope", nodeapi.ForkRequest{IDs: []string{"x"}}); return err },
		"Kill":          func() error { return a.Kill(ctx, "nope", sandbox.KillRequest) },
		"Stats":         func() error { _, err := a.Stats(ctx, "nope"); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errdefs.IsNotFound(err) {
				t.Errorf("%s(unknown) = %v, want not found", name, err)
			}
		})
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := a.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.create(a, "sb1")
	e.create(a, "sb2")
	if err := a.Kill(ctx, "sb1", sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, events)
	if ev.Type != nodeapi.EventKilled || ev.SandboxID != "sb1" || ev.Reason != sandbox.KillRequest || ev.ExecutionID != "exec-sb1" {
		t.Errorf("event %+v", ev)
	}
	e.assertNoHostObjects("sb1")
	if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", "sbx-sb1")); !os.IsNotExist(err) {
		t.Errorf("state dir left: %v", err)
	}
	if _, err := a.Get(ctx, "sb1"); !errdefs.IsNotFound(err) {
		t.Errorf("Get after kill: %v", err)
	}
	if err := a.Kill(ctx, "sb1", sandbox.KillRequest); !errdefs.IsNotFound(err) {
		t.Errorf("second kill: %v, want not found", err)
	}
	if sb, err := a.Get(ctx, "sb2"); err != nil || sb.State != sandbox.StateRunning {
		t.Errorf("other sandbox after kill: %+v, %v", sb, err)
	}
	// Every log line of the kill path names the reason.
	var n int
	for _, l := range e.logs.lines(t) {
		if l["sandbox_id"] == "sb1" && strings.Contains(l["msg"].(string), "kill") {
			n++
			if l["kill_reason"] != "request" {
				t.Errorf("kill path log line without kill_reason=request: %v", l)
			}
		}
	}
	if n < 2 {
		t.Errorf("%d kill log lines, want at least 2", n)
	}
}

func TestExit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		exit   func(e *env, id string)
		reason sandbox.KillReason
	}{
		{"exit", func(e *env, id string) { _ = e.fake.Exit(id, 3) }, sandbox.KillExited},
		{"driver oom", func(e *env, id string) { _ = e.fake.OOMKill(id) }, sandbox.KillOOM},
		{"cgroup oom", func(e *env, id string) {
			c, _ := e.cg.Get(sandbox.HostName(id))
			c.SetOOM(true)
			_ = e.fake.Exit(id, 137)
		}, sandbox.KillOOM},
		{"cgroup pids limit", func(e *env, id string) {
			c, _ := e.cg.Get(sandbox.HostName(id))
			c.SetPidsLimitHit(true)
			_ = e.fake.Exit(id, -1)
		}, sandbox.KillPidsLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fake.Config{})
			a := e.start()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			events, _ := a.Watch(ctx)
			e.create(a, "sb1")
			tt.exit(e, "sb1")
			ev := nextEvent(t, events)
			if ev.Type != nodeapi.EventExited || ev.Reason != tt.reason || ev.SandboxID != "sb1" {
				t.Errorf("event %+v, want exited with %s", ev, tt.reason)
			}
			e.assertNoHostObjects("sb1")
			if _, err := a.Get(ctx, "sb1"); !errdefs.IsNotFound(err) {
				t.Errorf("Get after exit: %v", err)
			}
		})
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	for _, memory := range []bool{true, false} {
		t.Run(map[bool]string{true: "memory", false: "filesystem"}[memory], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fake.Config{})
			a := e.start()
			ctx := context.Background()
			e.create(a, "sb1")
			for range 3 {
				if _, err := e.drv.Exec(ctx, "sb1", driver.Process{Args: []string{"tick"}}); err != nil {
					t.Fatal(err)
				}
			}
			e.layers.WriteFile("sb1", "/home/user/f", "data")

			p, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: memory})
			if err != nil {
				t.Fatal(err)
			}
			if p.State != sandbox.StatePaused || p.PausedWithMemory != memory || p.Epoch != 2 || p.Address != "" {
				t.Errorf("paused = %+v", p)
			}
			if len(e.net.Live()) != 0 || len(e.cg.Names()) != 0 {
				t.Errorf("paused sandbox holds slots %v cgroups %v", e.net.Live(), e.cg.Names())
			}
			if ly, ok := e.layers.Get("sb1"); !ok || ly.Mounted {
				t.Errorf("layer after pause %+v %v: want kept, unmounted", ly, ok)
			}
			if _, err := e.drv.Status(ctx, "sb1"); !errdefs.IsNotFound(err) {
				t.Errorf("runtime container after pause: %v", err)
			}
			if n := len(e.fake.CallsOf("checkpoint")); (n == 1) != memory {
				t.Errorf("%d checkpoints for memory=%v", n, memory)
			}
			if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: memory}); !errdefs.IsConflict(err) {
				t.Errorf("pause of paused: %v, want conflict", err)
			}
			if _, err := a.Stats(ctx, "sb1"); !errdefs.IsConflict(err) {
				t.Errorf("stats of paused: %v, want conflict", err)
			}

			r, err := a.Resume(ctx, "sb1", nodeapi.ResumeRequest{ExecutionID: "exec-2"})
			if err != nil {
				t.Fatal(err)
			}
			if r.State != sandbox.StateRunning || r.Epoch != 3 || r.ExecutionID != "exec-2" || r.Address == "" || r.PausedWithMemory {
				t.Errorf("resumed = %+v", r)
			}
			counter, _ := e.fake.Counter("sb1")
			if memory && counter != 3 {
				t.Errorf("counter after resume with memory = %d, want 3", counter)
			}
			if !memory && counter != 0 {
				t.Errorf("counter after filesystem-only resume = %d, want 0 (memory dropped)", counter)
			}
			if ly, _ := e.layers.Get("sb1"); ly.Files["/home/user/f"] != "data" || !ly.Mounted {
				t.Errorf("layer after resume %+v", ly)
			}
			inits := e.envd.Inits()
			if len(inits) != 2 || inits[1].InitToken != inits[0].InitToken || inits[1].Addr != r.Address {
				t.Errorf("inits %+v: want a second /init with the same token at the new address", inits)
			}
			if n := len(e.envd.Starts()); (n == 1) != memory {
				t.Errorf("%d start commands, memory=%v: the start command re-runs only after a filesystem-only pause", n, memory)
			}
			if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", "sbx-sb1", "snapshot")); !os.IsNotExist(err) {
				t.Errorf("snapshot dir left after resume: %v", err)
			}
			if _, err := a.Resume(ctx, "sb1", nodeapi.ResumeRequest{}); !errdefs.IsConflict(err) {
				t.Errorf("resume of running: %v, want conflict", err)
			}
			// The resumed incarnation is watched again.
			events, _ := a.Watch(t.Context())
			_ = e.fake.Exit("sb1", 0)
			if ev := nextEvent(t, events); ev.ExecutionID != "exec-2" || ev.Type != nodeapi.EventExited {
				t.Errorf("event %+v", ev)
			}
		})
	}
}

func TestResumeFailureStaysPaused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	ctx := context.Background()
	e.create(a, "sb1")
	if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatal(err)
	}
	e.fake.SetBehavior("sb1", fake.Behavior{RestoreErr: errors.New("boom")})
	if _, err := a.Resume(ctx, "sb1", nodeapi.ResumeRequest{ExecutionID: "exec-2"}); err == nil {
		t.Fatal("resume succeeded")
	}
	sb, err := a.Get(ctx, "sb1")
	if err != nil || sb.State != sandbox.StatePaused || sb.ExecutionID != "exec-sb1" || !sb.PausedWithMemory {
		t.Fatalf("after failed resume: %+v, %v", sb, err)
	}
	if len(e.net.Live()) != 0 || len(e.cg.Names()) != 0 {
		t.Errorf("failed resume left slots %v cgroups %v", e.net.Live(), e.cg.Names())
	}
	if ly, ok := e.layers.Get("sb1"); !ok || ly.Mounted {
		t.Errorf("layer after failed resume %+v %v: want kept, unmounted", ly, ok)
	}
	e.fake.SetBehavior("sb1", fake.Behavior{})
	if _, err := a.Resume(ctx, "sb1", nodeapi.ResumeRequest{}); err != nil {
		t.Fatalf("second resume: %v", err)
	}
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{Name: "plain", Capabilities: &driver.Capabilities{Freeze: true}})
	a := e.start()
	ctx := context.Background()
	c, err := a.Capabilities(ctx)
	if err != nil || c != (nodeapi.Capabilities{Driver: "plain", Freeze: true}) {
		t.Errorf("capabilities %+v, %v", c, err)
	}
	e.create(a, "sb1")
	_, err = a.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true})
	if !errdefs.IsUnsupported(err) || !strings.Contains(err.Error(), "filesystem only") {
		t.Errorf("pause with memory on a driver without checkpoint: %v, want unsupported naming the alternative", err)
	}
	if _, err := a.Fork(ctx, "sb1", nodeapi.ForkRequest{IDs: []string{"c1"}}); !errdefs.IsUnsupported(err) {
		t.Errorf("fork: %v, want unsupported", err)
	}
	if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{}); err != nil {
		t.Errorf("filesystem-only pause: %v", err)
	}
	if _, err := a.Resume(ctx, "sb1", nodeapi.ResumeRequest{}); err != nil {
		t.Errorf("resume: %v", err)
	}

	full := newEnv(t, fake.Config{})
	c, _ = full.start().Capabilities(ctx)
	if c != (nodeapi.Capabilities{Driver: "fake", MemoryCheckpoint: true, Freeze: true, Fork: true}) {
		t.Errorf("capabilities %+v", c)
	}
}

// gatedDriver blocks Checkpoint until its gate opens.
type gatedDriver struct {
	*fake.Driver
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedDriver) Checkpoint(ctx context.Context, id, dir string, o driver.CheckpointOptions) error {
	g.entered <- struct{}{}
	<-g.gate
	return g.Driver.Checkpoint(ctx, id, dir, o)
}

func TestPauseRefused(t *testing.T) {
	t.Parallel()
	t.Run("checkpoint in flight", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fake.Config{})
		g := &gatedDriver{Driver: e.fake, entered: make(chan struct{}, 1), gate: make(chan struct{})}
		e.drv = g
		a := e.start()
		ctx := context.Background()
		e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.EndAt = e.now().Add(10e9) })
		done := make(chan error, 1)
		go func() { _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true}); done <- err }()
		<-g.entered
		if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true}); !errdefs.IsExhausted(err) {
			t.Errorf("pause during a checkpoint: %v, want resource exhausted", err)
		}
		close(g.gate)
		if err := <-done; err != nil {
			t.Fatalf("first pause: %v", err)
		}
	})
	t.Run("fork in flight", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fake.Config{})
		g := &gatedDriver{Driver: e.fake, entered: make(chan struct{}, 1), gate: make(chan struct{})}
		e.drv = g
		a := e.start()
		ctx := context.Background()
		e.create(a, "sb1")
		done := make(chan error, 1)
		go func() { _, err := a.Fork(ctx, "sb1", nodeapi.ForkRequest{IDs: []string{"c1"}}); done <- err }()
		<-g.entered
		if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{}); !errdefs.IsExhausted(err) {
			t.Errorf("pause during a fork's checkpoint: %v, want resource exhausted", err)
		}
		close(g.gate)
		if err := <-done; err != nil {
			t.Fatalf("fork: %v", err)
		}
	})
	t.Run("low disk", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fake.Config{})
		e.tune = func(c *node.Config) { c.FreeDisk = func(string) (uint64, error) { return 10 << 20, nil } }
		a := e.start()
		ctx := context.Background()
		e.create(a, "sb1")
		if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true}); !errdefs.IsExhausted(err) {
			t.Errorf("pause on low disk: %v, want resource exhausted", err)
		}
		if sb, _ := a.Get(ctx, "sb1"); sb.State != sandbox.StateRunning {
			t.Errorf("refused pause left the sandbox %s", sb.State)
		}
		// The degraded pause (filesystem only) needs no memory image.
		if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{}); err != nil {
			t.Errorf("filesystem-only pause on low disk: %v", err)
		}
	})
	t.Run("checkpoint fails", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, fake.Config{})
		a := e.start()
		ctx := context.Background()
		e.fake.SetBehavior("sb1", fake.Behavior{CheckpointErr: errors.New("disk error")})
		e.create(a, "sb1")
		if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true}); !errdefs.IsExhausted(err) {
			t.Errorf("failed checkpoint: %v, want resource exhausted", err)
		}
		sb, _ := a.Get(ctx, "sb1")
		if sb.State != sandbox.StateRunning || sb.Epoch != 3 {
			t.Errorf("after failed checkpoint: %+v, want running in a new epoch", sb)
		}
		events, _ := a.Watch(t.Context())
		_ = e.fake.Exit("sb1", 1)
		if ev := nextEvent(t, events); ev.Type != nodeapi.EventExited {
			t.Errorf("the sandbox is not watched after a failed pause: %+v", ev)
		}
	})
}

func TestFork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	ctx := context.Background()
	e.create(a, "src")
	for range 2 {
		_, _ = e.drv.Exec(ctx, "src", driver.Process{Args: []string{"tick"}})
	}
	e.layers.WriteFile("src", "f", "1")

	kids, err := a.Fork(ctx, "src", nodeapi.ForkRequest{IDs: []string{"c1", "c2"}, ExecutionIDs: []string{"e1", "e2"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != 2 || kids[0].ID != "c1" || kids[1].ExecutionID != "e2" || kids[0].Address == kids[1].Address {
		t.Fatalf("children %+v %+v", kids[0], kids[1])
	}
	for _, id := range []string{"c1", "c2"} {
		if c, _ := e.fake.Counter(id); c != 2 {
			t.Errorf("%s counter %d, want 2 (from the checkpoint)", id, c)
		}
		if ly, ok := e.layers.Get(id); !ok || ly.Files["f"] != "1" || !ly.Mounted {
			t.Errorf("%s layer %+v", id, ly)
		}
		if _, ok := e.cg.Get(sandbox.HostName(id)); !ok {
			t.Errorf("%s has no cgroup", id)
		}
	}
	if sb, _ := a.Get(ctx, "src"); sb.State != sandbox.StateRunning || sb.Epoch != 1 {
		t.Errorf("source after fork %+v", sb)
	}
	// Children are independent of the source and of each other.
	e.layers.WriteFile("c1", "f", "changed")
	_, _ = e.drv.Exec(ctx, "c1", driver.Process{Args: []string{"tick"}})
	if c, _ := e.fake.Counter("c2"); c != 2 {
		t.Errorf("c2 counter changed with c1")
	}
	if ly, _ := e.layers.Get("src"); ly.Files["f"] != "1" {
		t.Errorf("source layer changed with c1")
	}
	if err := a.Kill(ctx, "c1", sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if sb, _ := a.Get(ctx, "c2"); sb == nil || sb.State != sandbox.StateRunning {
		t.Errorf("c2 after c1 killed: %+v", sb)
	}
	if entries, _ := os.ReadDir(filepath.Join(e.dir, "forks")); len(entries) > 0 {
		t.Errorf("fork images left: %v", entries)
	}
}

// TestForkCopiesOwnTokens: each copy's envd gets, at the /init after its
// restore, the copy's own access token from the request, and keeps it
// (a resume of the copy brings it again); without tokens in the request
// (an older control plane) the copies keep the source's.
func TestForkCopiesOwnTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	ctx := context.Background()
	e.create(a, "src")
	initsOf := func(addr string) []string {
		var toks []string
		for _, in := range e.envd.Inits() {
			if in.Addr == addr {
				toks = append(toks, in.Init.AccessToken)
			}
		}
		return toks
	}
	kids, err := a.Fork(ctx, "src", nodeapi.ForkRequest{IDs: []string{"c1", "c2"}, EnvdAccessTokens: []string{"access-c1", "access-c2"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range kids {
		if got, want := initsOf(k.Address), []string{"access-c" + strconv.Itoa(i+1)}; !slices.Equal(got, want) {
			t.Errorf("%s: /init access tokens %q, want %q", k.ID, got, want)
		}
	}
	if _, err := a.Pause(ctx, "c1", nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatal(err)
	}
	r, err := a.Resume(ctx, "c1", nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := initsOf(r.Address); len(got) == 0 || got[len(got)-1] != "access-c1" {
		t.Errorf("c1 after a resume: /init access tokens %q, want its own last", got)
	}
	old, err := a.Fork(ctx, "src", nodeapi.ForkRequest{IDs: []string{"c3"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := initsOf(old[0].Address); !slices.Equal(got, []string{"access-src"}) {
		t.Errorf("copy without a token in the request: /init access tokens %q, want the source's", got)
	}
	if _, err := a.Fork(ctx, "src", nodeapi.ForkRequest{IDs: []string{"c4", "c5"}, EnvdAccessTokens: []string{"x"}}); !errdefs.IsInvalid(err) {
		t.Errorf("fork with 1 token for 2 copies: %v, want invalid", err)
	}
}

func TestForkErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		req   nodeapi.ForkRequest
		prep  func(e *env)
		class error
	}{
		{name: "no ids", req: nodeapi.ForkRequest{}, class: errdefs.ErrInvalid},
		{name: "bad id", req: nodeapi.ForkRequest{IDs: []string{"A B"}}, class: errdefs.ErrInvalid},
		{name: "duplicate ids", req: nodeapi.ForkRequest{IDs: []string{"c1", "c1"}}, class: errdefs.ErrInvalid},
		{name: "execution ids", req: nodeapi.ForkRequest{IDs: []string{"c1"}, ExecutionIDs: []string{"a", "b"}}, class: errdefs.ErrInvalid},
		{name: "existing id", req: nodeapi.ForkRequest{IDs: []string{"c1", "other"}}, class: errdefs.ErrAlreadyExists},
		{name: "restore fails", req: nodeapi.ForkRequest{IDs: []string{"c1", "c2"}},
			prep: func(e *env) { e.fake.SetBehavior("c2", fake.Behavior{RestoreErr: errors.New("boom")}) }},
		{name: "copy fails", req: nodeapi.ForkRequest{IDs: []string{"c1", "c2"}},
			prep: func(e *env) { e.layers.CopyErr = errors.New("boom") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fake.Config{})
			a := e.start()
			ctx := context.Background()
			e.create(a, "src")
			e.create(a, "other")
			if tt.prep != nil {
				tt.prep(e)
			}
			_, err := a.Fork(ctx, "src", tt.req)
			if err == nil || (tt.class != nil && !errors.Is(err, tt.class)) {
				t.Fatalf("fork: %v, want %v", err, tt.class)
			}
			for _, id := range []string{"c1", "c2"} {
				e.assertNoHostObjects(id)
				if _, err := a.Get(ctx, id); !errdefs.IsNotFound(err) {
					t.Errorf("Get(%s) after failed fork: %v", id, err)
				}
			}
			if sb, _ := a.Get(ctx, "src"); sb == nil || sb.State != sandbox.StateRunning {
				t.Errorf("source after failed fork: %+v", sb)
			}
			if sb, _ := a.Get(ctx, "other"); sb == nil || sb.State != sandbox.StateRunning {
				t.Errorf("other after failed fork: %+v", sb)
			}
		})
	}
}

func TestStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	ctx := context.Background()
	e.create(a, "sb1")
	c, _ := e.cg.Get("sbx-sb1")
	c.SetStats(cgroup.Stats{CPUUsageNanos: 1e9, MemoryBytes: 100 << 20, MemoryPeakBytes: 150 << 20})
	e.layers.WriteFile("sb1", "f", strings.Repeat("x", 4096))
	st, err := a.Stats(ctx, "sb1")
	if err != nil {
		t.Fatal(err)
	}
	if st.CPUCount != 1 || st.MemoryUsedBytes != 100<<20 || st.MemoryPeakBytes != 150<<20 || st.MemoryTotal != 256<<20 ||
		st.DiskUsedBytes != 4096 || st.DiskTotalBytes != 1024<<20 {
		t.Errorf("stats %+v", st)
	}
	if st.CPUUsedPct < 0 {
		t.Errorf("cpu %v", st.CPUUsedPct)
	}
}

func TestUpdateNetwork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	ctx := context.Background()
	e.create(a, "sb1")
	p := netslot.Policy{Internet: true, DenyOut: nil}
	p.AllowOut = append(p.AllowOut, mustPrefix(t, "203.0.113.0/24"))
	if err := a.UpdateNetwork(ctx, "sb1", p); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.net.Policy("sb1"); !got.Internet || len(got.AllowOut) != 1 {
		t.Errorf("slot policy %+v", got)
	}
	if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	p2 := netslot.Policy{Internet: false}
	if err := a.UpdateNetwork(ctx, "sb1", p2); err != nil {
		t.Fatalf("update of paused: %v", err)
	}
	if _, err := a.Resume(ctx, "sb1", nodeapi.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.net.Policy("sb1"); got.Internet || len(got.AllowOut) != 0 {
		t.Errorf("policy after resume %+v, want the one set while paused", got)
	}
	if sb, _ := a.Get(ctx, "sb1"); sb.Network.Internet {
		t.Errorf("sandbox network %+v", sb.Network)
	}
}
