package nodeinteg

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/warren-sandbox/warren/api/envd/process"
	"github.com/warren-sandbox/warren/api/envd/process/processconnect"
	"github.com/warren-sandbox/warren/internal/cgroup"
	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/runc"
	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/netslot/netslottest"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/node/rootfslayers"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/testenv"
)

var http1Client = &http.Client{}

// The template's tree, unpacked once for the package.
var (
	tmplOnce sync.Once
	tmplDir  string
	tmplErr  error
	tmplBase string
)

func TestMain(m *testing.M) {
	if os.Getenv(agentProcessEnv) != "" {
		runAgentProcess() // never returns
	}
	code := m.Run()
	if tmplBase != "" {
		os.RemoveAll(tmplBase)
	}
	os.Exit(code)
}

// host is one simulated node machine: the agent's collaborators and
// directories, shared by the agents a test starts on it.
type host struct {
	t      testing.TB
	dir    string
	tmpl   string
	runsc  string
	envd   string
	cgRoot string
	// pool is the first agent's network slot pool; later agents (restarts)
	// open a new pool on netCfg.
	pool   netslot.Pool
	netCfg netslot.Config
	agents int
	logs   io.Writer
	// tune, when set, changes the configuration of every agent started.
	tune func(*node.Config)
}

func newHost(t testing.TB) *host {
	t.Helper()
	testenv.NeedRoot(t, "node integration tests")
	h := &host{
		t:     t,
		runsc: testenv.Runsc(t),
		envd:  testenv.Envd(t),
		logs:  io.Discard,
	}
	h.pool, h.netCfg = netslottest.New(t)
	tar := testenv.RootFSTar(t)
	_, err := exec.LookPath("mkfs.ext4")
	testenv.Require(t, err == nil, "mkfs.ext4")
	tmplOnce.Do(func() {
		tmplBase, tmplErr = os.MkdirTemp("", "warren-nodeinteg-")
		if tmplErr == nil {
			tmplDir = filepath.Join(tmplBase, "rootfs")
			tmplErr = unpackTemplate(tar, tmplDir)
		}
	})
	if tmplErr != nil {
		t.Fatalf("unpack template: %v", tmplErr)
	}
	h.tmpl = tmplDir
	h.dir = t.TempDir()
	h.cgRoot = testenv.Name("warren-nodeinteg-")
	h.logs = testenv.Output(t) // shown when the test fails or runs with -v
	t.Cleanup(h.cleanup)
	return h
}

// unpackTemplate unpacks the root filesystem tar at tarPath into the new
// directory dir, as the template catalog does.
func unpackTemplate(tarPath, dir string) error {
	f, err := os.Open(tarPath)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	return layer.UnpackRootFS(context.Background(), f, dir, nil)
}

// cleanup removes whatever a test left on the host, even after a failure:
// a new agent adopts the sandboxes still running and kills them (and
// reclaims what belongs to none), then mounts under the test's directory
// and the test's cgroups go.
func (h *host) cleanup() {
	if h.agents > 0 {
		a, _ := h.agent()
		if list, err := a.List(context.Background()); err == nil {
			for _, sb := range list {
				_ = a.Kill(context.Background(), sb.ID, sandbox.KillAdmin)
			}
		}
		a.Close()
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var mps []string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], h.dir+"/") {
				mps = append(mps, f[4])
			}
		}
		slices.Sort(mps)
		for i := len(mps) - 1; i >= 0; i-- {
			if err := unix.Unmount(mps[i], 0); err != nil {
				h.t.Logf("cleanup: unmount %s: %v", mps[i], err)
			}
		}
	}
	for _, c := range []string{"cpu", "cpuacct", "memory", "pids", "freezer", "cpuset", "devices", "blkio", "systemd", "unified"} {
		_ = os.Remove(filepath.Join("/sys/fs/cgroup", c, h.cgRoot))
	}
}

func (h *host) log() *slog.Logger {
	return slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// agent starts an agent (and a runsc driver) on the host, as a restarted
// node process would.
func (h *host) agent() (*node.Agent, *runsc.Driver) {
	drv, err := runsc.New(runsc.Config{Path: h.runsc, StateDir: filepath.Join(h.dir, "runsc"), CgroupRoot: "/" + h.cgRoot, Logger: h.log()})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.agentOn(drv), drv
}

// agentOn starts an agent over drv on the host; opts change its
// configuration.
func (h *host) agentOn(drv driver.Driver, opts ...func(*node.Config)) *node.Agent {
	t := h.t
	t.Helper()
	log := h.log()
	var err error
	cg, err := cgroup.NewManager(h.cgRoot, log)
	if err != nil {
		t.Fatal(err)
	}
	pool := h.pool
	if h.agents++; h.agents > 1 {
		if pool, err = netslot.NewPool(h.netCfg, log); err != nil {
			t.Fatal(err)
		}
	}
	layersRoot := filepath.Join(h.dir, "layers")
	rm, err := rootfs.New(rootfs.Config{DataRoot: layersRoot}, log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{
		DataDir: filepath.Join(h.dir, "node"), Driver: drv, Cgroups: cg, Net: pool,
		Layers: rootfslayers.New(rm, layersRoot), EnvdPath: h.envd, Logger: log,
		ReclaimInterval: -1, MinFreeDiskBytes: -1,
	}
	if h.tune != nil {
		h.tune(&cfg)
	}
	for _, o := range opts {
		o(&cfg)
	}
	a, err := node.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (h *host) createReq(id string) nodeapi.CreateRequest {
	return nodeapi.CreateRequest{
		ID: id, ExecutionID: "e-" + id,
		Template:        nodeapi.Template{ID: "base", BuildID: "b", RootFS: h.tmpl, User: "user", Workdir: "/home/user"},
		Resources:       sandbox.Resources{VCPUs: 1, MemoryMB: 512, DiskMB: 256},
		EnvVars:         map[string]string{"FROM_CREATE": "yes"},
		EnvdAccessToken: "tok-" + id,
	}
}

// run runs cmd in the sandbox through envd's process service and returns
// its stdout and exit code.
func run(t testing.TB, sb *nodeapi.Sandbox, token, cmd string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := processconnect.NewProcessClient(http1Client, "http://"+sb.Address)
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", cmd}}, Stdin: proto.Bool(false)})
	req.Header().Set("X-Access-Token", token)
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("user:")))
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatalf("start %q: %v", cmd, err)
	}
	defer stream.Close()
	var out strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
		}
		if end := ev.GetEnd(); end != nil {
			return out.String(), int(end.GetExitCode())
		}
	}
	t.Fatalf("run %q: stream ended without an end event: %v", cmd, stream.Err())
	return "", -1
}

func counter(t testing.TB, sb *nodeapi.Sandbox, token string) int {
	t.Helper()
	out, code := run(t, sb, token, "cat /tmp/counter")
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if code != 0 || err != nil {
		t.Fatalf("counter: %q exit %d", out, code)
	}
	return n
}

// waitCounterAbove waits until the counter passes n (the counter ticks
// every 50 ms; the wait is bounded generously for a loaded machine).
func waitCounterAbove(t testing.TB, sb *nodeapi.Sandbox, token string, n int) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// The counter file appears with the loop's first tick: until then
		// (a loaded machine) cat fails.
		out, code := run(t, sb, token, "cat /tmp/counter")
		c, err := strconv.Atoi(strings.TrimSpace(out))
		if code == 0 && err == nil && c > n {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("counter stuck: %q exit %d, want above %d", out, code, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// leftovers lists the host objects of sandbox id that remain (of every
// sandbox of the host's agents for id "": mounts and loop devices).
func (h *host) leftovers(drv driver.Driver, id string) []string {
	var out []string
	ctx := context.Background()
	if ids, _ := drv.List(ctx); len(ids) > 0 {
		for _, x := range ids {
			if x == id {
				out = append(out, "runsc container "+x)
			}
		}
	}
	for _, c := range []string{"cpu", "memory", "pids", "freezer", "unified"} {
		p := filepath.Join("/sys/fs/cgroup", c, h.cgRoot, sandbox.HostName(id))
		if _, err := os.Stat(p); err == nil {
			out = append(out, "cgroup "+p)
		}
	}
	if nss, err := os.ReadDir(h.netCfg.NetNSDir); err == nil {
		for _, ns := range nss {
			if strings.HasPrefix(ns.Name(), sandbox.HostName(id)+"-") {
				out = append(out, "netns "+ns.Name())
			}
		}
	}
	mine := func(p string) bool {
		return strings.HasPrefix(p, h.dir) && strings.Contains(p+"/", "/"+sandbox.HostName(id)+"/")
	}
	if id == "" { // everything of the host
		mine = func(p string) bool { return strings.HasPrefix(p, h.dir) }
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && mine(f[4]) {
				out = append(out, "mount "+f[4])
			}
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if b, err := os.ReadFile(l); err == nil && mine(strings.TrimSpace(string(b))) {
			out = append(out, "loop "+l)
		}
	}
	for _, d := range []string{filepath.Join(h.dir, "node", "sandboxes", sandbox.HostName(id)), filepath.Join(h.dir, "layers", sandbox.HostName(id))} {
		if _, err := os.Stat(d); err == nil {
			out = append(out, "dir "+d)
		}
	}
	return out
}

// TestLifecycle: create → envd health → exec through envd → pause with
// memory → resume keeps a counter → kill leaves no host object.
func TestLifecycle(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	id := "lc" + sandbox.NewID()[:10]
	tok := "tok-" + id
	t.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })

	start := time.Now()
	sb, err := a.Create(ctx, h.createReq(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create took %s, address %s", time.Since(start), sb.Address)
	out, code := run(t, sb, tok, `echo "$(id -un) $FROM_CREATE $(pwd)"`)
	if code != 0 || strings.TrimSpace(out) != "user yes /home/user" {
		t.Fatalf("exec through envd: %q exit %d", out, code)
	}
	if _, code := run(t, sb, tok, "exit 7"); code != 7 {
		t.Errorf("exit code %d, want 7", code)
	}
	if err := node.NewHTTPEnvd(nil).Start(ctx, sb.Address, tok, node.EnvdProcess{
		Tag: "counter", Cmd: "/bin/bash", User: "user",
		Args: []string{"-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new && mv /tmp/counter.new /tmp/counter; sleep 0.05; done"},
	}); err != nil {
		t.Fatal(err)
	}
	run(t, sb, tok, "echo layer > /home/user/on-layer")
	before := waitCounterAbove(t, sb, tok, 3)

	start = time.Now()
	p, err := a.Pause(ctx, id, nodeapi.PauseRequest{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pause with memory took %s", time.Since(start))
	if p.State != sandbox.StatePaused || !p.PausedWithMemory {
		t.Fatalf("paused %+v", p)
	}
	// Paused and recent: it keeps its objects, with a runtime container
	// prepared for the resume (keep_linux_test.go has the rest).
	if kept, err := a.HostObjectsKept(id); err != nil || !kept {
		t.Errorf("paused sandbox keeps its host objects = %v, %v; want true", kept, err)
	}
	if left := h.leftovers(drv, id); !hasKinds(left, "runsc", "cgroup", "netns", "mount") {
		t.Errorf("host objects of a recently paused sandbox: %v (want its container, cgroup, netns and mount kept)", left)
	}

	start = time.Now()
	r, err := a.Resume(ctx, id, nodeapi.ResumeRequest{ExecutionID: "e2"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resume took %s, address %s", time.Since(start), r.Address)
	after := counter(t, r, tok)
	if after < before {
		t.Errorf("counter went back from %d to %d: memory not kept", before, after)
	}
	waitCounterAbove(t, r, tok, after)
	if out, _ := run(t, r, tok, "cat /home/user/on-layer"); strings.TrimSpace(out) != "layer" {
		t.Errorf("file on the writable layer after resume: %q", out)
	}

	if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if left := h.leftovers(drv, id); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}
}

// TestFilesystemPause: a filesystem-only pause keeps the writable layer
// and drops memory.
func TestFilesystemPause(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	id := "fs" + sandbox.NewID()[:10]
	tok := "tok-" + id
	t.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })
	req := h.createReq(id)
	req.Template.StartCmd = "echo started >> /home/user/starts"
	sb, err := a.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, tok, "echo kept > /home/user/f; echo gone > /tmp/f")
	if _, err := a.Pause(ctx, id, nodeapi.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	r, err := a.Resume(ctx, id, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := run(t, r, tok, "cat /home/user/f; cat /tmp/f 2>/dev/null || echo no-tmp; sleep 1; cat /home/user/starts | wc -l")
	if got := strings.Fields(out); len(got) != 3 || got[0] != "kept" || got[1] != "no-tmp" || got[2] != "2" {
		t.Errorf("after filesystem-only resume: %q, want kept, no-tmp, 2 start command runs", out)
	}
	if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if left := h.leftovers(drv, id); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}
}

// TestAgentRestart: an agent that goes away without stopping its
// sandboxes is replaced by a new one on the same data dir, which adopts the
// running sandbox (still reachable, still watched) and reclaims objects of
// sandboxes it does not know.
func TestAgentRestart(t *testing.T) {
	h := newHost(t)
	a1, _ := h.agent()
	ctx := context.Background()
	id := "rs" + sandbox.NewID()[:10]
	tok := "tok-" + id
	sb, err := a1.Create(ctx, h.createReq(id))
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, tok, "echo before > /tmp/mark")
	// A half-made sandbox: a create that never finished.
	leak := "lk" + sandbox.NewID()[:10]
	if err := os.MkdirAll(filepath.Join(h.dir, "node", "sandboxes", sandbox.HostName(leak)), 0o700); err != nil {
		t.Fatal(err)
	}
	a1.Close() // as if killed: sandboxes keep running

	a2, drv2 := h.agent()
	defer a2.Close()
	t.Cleanup(func() { _ = a2.Kill(context.Background(), id, sandbox.KillAdmin) })
	got, err := a2.Get(ctx, id)
	if err != nil || got.State != sandbox.StateRunning || got.Address != sb.Address {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	if out, _ := run(t, got, tok, "cat /tmp/mark"); strings.TrimSpace(out) != "before" {
		t.Errorf("sandbox after agent restart: %q", out)
	}
	if n := a2.Reclaimed()[node.KindStateDir]; n != 1 {
		t.Errorf("reclaimed state dirs %d, want 1 (%v)", n, a2.Reclaimed())
	}
	events, _ := a2.Watch(t.Context())
	// The sandbox dies by itself (as far as the agent knows).
	if err := drv2.Kill(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.SandboxID != id || ev.Type != nodeapi.EventExited {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("exit of the adopted sandbox not seen")
	}
	if left := h.leftovers(drv2, id); len(left) > 0 {
		t.Errorf("left after exit: %v", left)
	}
}

// TestFork: two copies of a running sandbox each continue from the
// checkpoint, independently of the source and of each other.
func TestFork(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	id := "fk" + sandbox.NewID()[:10]
	tok := "tok-" + id
	// Not the source's ID with a suffix: runsc looks containers up by
	// prefix and refuses an ambiguous one.
	kids := []string{"fa" + sandbox.NewID()[:10], "fb" + sandbox.NewID()[:10]}
	t.Cleanup(func() {
		for _, x := range append([]string{id}, kids...) {
			_ = a.Kill(context.Background(), x, sandbox.KillAdmin)
		}
	})
	sb, err := a.Create(ctx, h.createReq(id))
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, tok, "echo source > /home/user/who; echo 41 > /tmp/n")
	start := time.Now()
	forks, err := a.Fork(ctx, id, nodeapi.ForkRequest{IDs: kids})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fork of 2 took %s", time.Since(start))
	for i, f := range forks {
		out, _ := run(t, f, tok, "cat /home/user/who /tmp/n")
		if got := strings.Fields(out); len(got) != 2 || got[0] != "source" || got[1] != "41" {
			t.Errorf("copy %s sees %q, want the source's files and memory", f.ID, out)
		}
		run(t, f, tok, fmt.Sprintf("echo copy%d > /home/user/who; echo %d > /tmp/n", i, i))
	}
	for i, f := range forks {
		if out, _ := run(t, f, tok, "cat /home/user/who /tmp/n"); strings.Join(strings.Fields(out), " ") != fmt.Sprintf("copy%d %d", i, i) {
			t.Errorf("copy %s: %q: copies are not independent", f.ID, out)
		}
	}
	if out, _ := run(t, sb, tok, "cat /home/user/who /tmp/n"); strings.Join(strings.Fields(out), " ") != "source 41" {
		t.Errorf("source after fork: %q", out)
	}
	for _, x := range append([]string{id}, kids...) {
		if err := a.Kill(ctx, x, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
		if left := h.leftovers(drv, x); len(left) > 0 {
			t.Errorf("left after kill of %s: %v", x, left)
		}
	}
	if left := h.leftovers(drv, ""); len(left) > 0 {
		t.Errorf("left on the host: %v", left)
	}
}

// TestOOMAndStats: stats come from the sandbox's cgroup; a sandbox that
// the host's memory wall ends is reported with reason oom. Only memory the
// sentry holds itself can do that (a single process that allocates loses
// only itself: TestRunawayAllocation), and the guest's tmpfs /tmp is
// bounded below the wall (TestTmpFill), so the test lowers the wall to
// just above the sandbox's use and fills /tmp.
func TestOOMAndStats(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	id := "om" + sandbox.NewID()[:10]
	tok := "tok-" + id
	t.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })
	req := h.createReq(id)
	req.Resources.MemoryMB = 192
	sb, err := a.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.Stats(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.MemoryUsedBytes == 0 || st.MemoryTotal != 192<<20 || st.DiskTotalBytes == 0 || st.CPUCount != 1 {
		t.Errorf("stats %+v", st)
	}
	events, _ := a.Watch(t.Context())
	lowerMemoryWall(t, filepath.Join("/sys/fs/cgroup/memory", h.cgRoot, sandbox.HostName(id)), 32<<20)
	// Keep more in the guest's tmpfs (96 MiB) than the wall allows.
	go func() {
		_ = node.NewHTTPEnvd(nil).Start(ctx, sb.Address, tok, node.EnvdProcess{Tag: "bomb", Cmd: "/bin/bash", User: "user",
			Args: []string{"-c", "for i in $(seq 9); do head -c 10M /dev/zero > /tmp/fill$i; done; sleep 60"}})
	}()
	select {
	case ev := <-events:
		if ev.SandboxID != id || ev.Type != nodeapi.EventExited || ev.Reason != sandbox.KillOOM {
			t.Errorf("event %+v, want %s exited with reason oom", ev, id)
		}
	case <-time.After(120 * time.Second):
		t.Fatal("the memory bomb did not end the sandbox")
	}
	if left := h.leftovers(drv, id); len(left) > 0 {
		t.Errorf("left after oom: %v", left)
	}
}

// lowerMemoryWall sets the memory limit of the cgroup v1 directory dir to
// its current use plus room (memsw too, where swap is accounted).
func lowerMemoryWall(t *testing.T, dir string, room int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		t.Fatalf("memory use: %v", err)
	}
	used, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("memory use %q: %v", b, err)
	}
	limit := []byte(strconv.FormatInt(used+room, 10))
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), limit, 0); err != nil {
		t.Fatalf("memory limit: %v", err)
	}
	if memsw := filepath.Join(dir, "memory.memsw.limit_in_bytes"); fileExists(memsw) {
		if err := os.WriteFile(memsw, limit, 0); err != nil {
			t.Fatalf("memsw limit: %v", err)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestCycles: repeated create/kill leaves nothing behind.
func TestCycles(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	n := 20
	if s := os.Getenv("WARREN_TEST_CYCLES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for i := range n {
		id := fmt.Sprintf("cy%02d%s", i, sandbox.NewID()[:8])
		if _, err := a.Create(ctx, h.createReq(id)); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if left := h.leftovers(drv, id); len(left) > 0 {
			t.Fatalf("cycle %d left %v", i, left)
		}
	}
	if ids, _ := drv.List(ctx); len(ids) > 0 {
		t.Errorf("runtime containers left: %v", ids)
	}
	if entries, _ := os.ReadDir(filepath.Join(h.dir, "node", "sandboxes")); len(entries) > 0 {
		t.Errorf("state dirs left: %v", entries)
	}
	if left := h.leftovers(drv, ""); len(left) > 0 {
		t.Errorf("left on the host: %v", left)
	}
}

// TestTemplateSnapshot: a snapshot on ready restores with its start
// command already running.
func TestTemplateSnapshot(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	tmpl := h.createReq("x").Template
	tmpl.StartCmd = "echo started > /home/user/started; i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new && mv /tmp/counter.new /tmp/counter; sleep 0.05; done"
	dir := filepath.Join(h.dir, "template-snapshot")
	start := time.Now()
	if err := a.Snapshot(ctx, tmpl, "test $(cat /tmp/counter 2>/dev/null || echo 0) -gt 5", dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot took %s", time.Since(start))
	defer func() {
		if err := a.DeleteSnapshot(context.Background(), dir); err != nil {
			t.Error(err)
		}
		if left := h.leftovers(drv, ""); len(left) > 0 {
			t.Errorf("left on the host: %v", left)
		}
	}()
	tmpl.SnapshotDir = dir
	for _, id := range []string{"ta" + sandbox.NewID()[:10], "tb" + sandbox.NewID()[:10]} {
		req := h.createReq(id)
		req.Template = tmpl
		start := time.Now()
		sb, err := a.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("create from the snapshot took %s", time.Since(start))
		tok := "tok-" + id
		if out, _ := run(t, sb, tok, "cat /home/user/started"); strings.TrimSpace(out) != "started" {
			t.Errorf("file the start command wrote: %q", out)
		}
		c := counter(t, sb, tok)
		if c <= 5 {
			t.Errorf("counter %d: the snapshot was taken before the ready command passed", c)
		}
		waitCounterAbove(t, sb, tok, c)
		if out, _ := run(t, sb, tok, "echo $FROM_CREATE"); strings.TrimSpace(out) != "yes" {
			t.Errorf("create-time env after restore: %q", out)
		}
		if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
		if left := h.leftovers(drv, id); len(left) > 0 {
			t.Errorf("left after kill: %v", left)
		}
	}
}

// TestRunc: the agent over the runc driver (plain containers): create,
// exec through envd, a refused pause with memory, a filesystem-only pause
// and resume, kill without leftovers.
func TestRunc(t *testing.T) {
	h := newHost(t)
	_, err := exec.LookPath("runc")
	testenv.Require(t, err == nil, "runc (apt-get install runc)")
	drv, err := runc.New(runc.Config{StateDir: filepath.Join(h.dir, "runc"), CgroupRoot: "/" + h.cgRoot, Logger: h.log()})
	if err != nil {
		t.Fatal(err)
	}
	a := h.agentOn(drv)
	defer a.Close()
	t.Cleanup(func() {
		// The host's clean-up agent runs runsc; runc's sandboxes go here.
		list, _ := a.List(context.Background())
		for _, sb := range list {
			_ = a.Kill(context.Background(), sb.ID, sandbox.KillAdmin)
		}
	})
	ctx := context.Background()
	id := "rc" + sandbox.NewID()[:10]
	tok := "tok-" + id
	sb, err := a.Create(ctx, h.createReq(id))
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, tok, "echo kept > /home/user/f")
	if out, code := run(t, sb, tok, "id -un; cat /home/user/f"); code != 0 || strings.Join(strings.Fields(out), " ") != "user kept" {
		t.Errorf("exec through envd on runc: %q exit %d", out, code)
	}
	if _, err := a.Pause(ctx, id, nodeapi.PauseRequest{Memory: true}); !errdefs.IsUnsupported(err) {
		t.Errorf("pause with memory on runc: %v, want unsupported", err)
	}
	if _, err := a.Pause(ctx, id, nodeapi.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	r, err := a.Resume(ctx, id, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, r, tok, "cat /home/user/f"); strings.TrimSpace(out) != "kept" {
		t.Errorf("layer after filesystem-only resume on runc: %q", out)
	}
	if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if left := h.leftovers(drv, id); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}
}

// TestSnapshotSandbox: a snapshot of a running sandbox (left running)
// restores as a new sandbox with its memory and files.
func TestSnapshotSandbox(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	id := "ss" + sandbox.NewID()[:10]
	tok := "tok-" + id
	sb, err := a.Create(ctx, h.createReq(id))
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, tok, "echo disk > /home/user/f; echo mem > /tmp/m")
	dir := filepath.Join(h.dir, "sandbox-snapshot")
	start := time.Now()
	tmpl, err := a.SnapshotSandboxInto(ctx, id, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot of a running sandbox took %s", time.Since(start))
	if out, _ := run(t, sb, tok, "cat /tmp/m"); strings.TrimSpace(out) != "mem" {
		t.Errorf("source after snapshot: %q", out)
	}
	tmpl.SnapshotDir = dir
	cid := "sc" + sandbox.NewID()[:10]
	req := h.createReq(cid)
	req.Template = tmpl
	req.EnvdAccessToken = "other-" + cid
	c, err := a.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, c, "other-"+cid, "cat /home/user/f /tmp/m"); strings.Join(strings.Fields(out), " ") != "disk mem" {
		t.Errorf("sandbox from the snapshot: %q", out)
	}
	for _, x := range []string{id, cid} {
		if err := a.Kill(ctx, x, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.DeleteSnapshot(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if left := h.leftovers(drv, ""); len(left) > 0 {
		t.Errorf("left on the host: %v", left)
	}
}
