package nodeinteg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// waitPoolReady waits (polling, generously) until tmpl's pool has n ready
// members.
func waitPoolReady(t testing.TB, a *node.Agent, tmpl string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for a.Pools()[tmpl].Ready < n {
		if time.Now().After(deadline) {
			t.Fatalf("pool %s not ready within 2 minutes: %+v", tmpl, a.Pools()[tmpl])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// claim reserves a member of the pool and creates sandbox req from it.
func claim(t testing.TB, a *node.Agent, req nodeapi.CreateRequest) *nodeapi.Sandbox {
	t.Helper()
	id, ok := a.Reserve(req.Template, req.Resources)
	if !ok {
		t.Fatal("no pool member to reserve")
	}
	req.ID, req.ExecutionID, req.EnvdAccessToken = id, "e-"+id, "tok-"+id
	sb, err := a.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("create from the pool: %v", err)
	}
	if sb.ID != id {
		t.Fatalf("created %s, want the pool member %s", sb.ID, id)
	}
	return sb
}

// TestWarmPoolRunsc: a member of a runsc pool, claimed, runs commands with
// the create's environment and access token, pauses, resumes and is
// killed without leftovers.
func TestWarmPoolRunsc(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	req := h.createReq("unused")
	if err := a.SetPool(ctx, req.Template, req.Resources, 1); err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, a, "base", 1)
	req.EnvVars = map[string]string{"FROM_CREATE": "claimed"}
	sb := claim(t, a, req)
	if out, code := run(t, sb, "tok-"+sb.ID, "echo $FROM_CREATE"); code != 0 || strings.TrimSpace(out) != "claimed" {
		t.Fatalf("command in the claimed sandbox: %q (exit %d), want the create's env", out, code)
	}
	if _, err := a.Pause(ctx, sb.ID, nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatalf("pause: %v", err)
	}
	rs, err := a.Resume(ctx, sb.ID, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if out, code := run(t, rs, "tok-"+sb.ID, "echo $FROM_CREATE"); code != 0 || strings.TrimSpace(out) != "claimed" {
		t.Fatalf("command after resume: %q (exit %d)", out, code)
	}
	if err := a.Kill(ctx, sb.ID, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if left := h.leftovers(drv, sb.ID); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}
	waitPoolReady(t, a, "base", 1)
	if err := a.SetPool(ctx, req.Template, req.Resources, 0); err != nil {
		t.Fatal(err)
	}
}

// TestWarmPoolClaimResizesRunsc: a member of a runsc pool made with one
// CPU and 512 MiB becomes a sandbox of two CPUs, 1 GiB and a task limit of
// 64: the host cgroup has the create's CPU quota and the wall above its
// limits (memory + overhead, pids for 64 tasks a user), and the guest's
// user is held to 64 tasks. The guest keeps what it read at boot (its
// /tmp stays half of 512 MiB), and a pause with memory and a resume work
// (the restore needs the mounts the image was taken with).
func TestWarmPoolClaimResizesRunsc(t *testing.T) {
	h := newHost(t)
	a, _ := h.agent()
	defer a.Close()
	ctx := context.Background()
	req := h.createReq("unused")
	if err := a.SetPool(ctx, req.Template, req.Resources, 1); err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, a, "base", 1)
	req.Resources.VCPUs, req.Resources.Pids, req.Resources.MemoryMB = 2, 64, 1024
	sb := claim(t, a, req)
	tok := "tok-" + sb.ID
	checkHost := func(when string) {
		t.Helper()
		cg := sandbox.HostName(sb.ID)
		read := func(ctrl, file string) string {
			b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, h.cgRoot, cg, file))
			if err != nil {
				t.Fatalf("%s: cgroup: %v", when, err)
			}
			return strings.TrimSpace(string(b))
		}
		if got := read("cpu", "cpu.cfs_quota_us"); got != "200000" {
			t.Errorf("%s: cpu.cfs_quota_us %s, want 200000 (2 CPUs)", when, got)
		}
		if got, want := read("pids", "pids.max"), strconv.FormatInt(runsc.HostPids(64), 10); got != want {
			t.Errorf("%s: pids.max %s, want %s (the wall for 64 tasks a user)", when, got, want)
		}
		if got, want := read("memory", "memory.limit_in_bytes"), strconv.FormatInt(runsc.HostMemoryWall(1024, runsc.ReserveMB(1024)), 10); got != want {
			t.Errorf("%s: memory.limit_in_bytes %s, want %s (1 GiB + overhead + oom reserve)", when, got, want)
		}
	}
	const look = "ulimit -u; df -BM --output=size /tmp | tail -1; nproc; free -m | awk '/^Mem:/{print $2}'"
	guest := func(when string) []string {
		t.Helper()
		out, code := runAs(t, sb, tok, "user", look)
		f := strings.Fields(out)
		if code != 0 || len(f) != 4 || f[0] != "64" || f[1] != "256M" {
			t.Errorf("%s: ulimit -u, /tmp size, nproc, memory: %q (exit %d), want 64 tasks and the member's 256M /tmp", when, out, code)
		}
		return f
	}
	checkHost("claimed")
	t.Logf("guest after the claim (tasks, /tmp, nproc, MemTotal MiB): %v", guest("claimed"))
	if _, code := runAs(t, sb, tok, "user", "echo kept > /tmp/mark"); code != 0 {
		t.Fatal("write /tmp/mark")
	}
	if _, err := a.Pause(ctx, sb.ID, nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatalf("pause of a resized member: %v", err)
	}
	rs, err := a.Resume(ctx, sb.ID, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatalf("resume of a resized member: %v", err)
	}
	sb = rs
	checkHost("resumed")
	t.Logf("guest after a resume: %v", guest("resumed"))
	if out, code := runAs(t, sb, tok, "user", "cat /tmp/mark"); code != 0 || strings.TrimSpace(out) != "kept" {
		t.Errorf("/tmp/mark after resume: %q (exit %d)", out, code)
	}
	if err := a.Kill(ctx, sb.ID, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkWarmPoolCreate: create p50/p99 with and without a warm pool, in
// the same run (each iteration one cold create and one claim, each
// killed; the pool refills between claims, untimed).
//
//	go test -run '^$' -bench WarmPoolCreate -benchtime 20x ./internal/node/nodeinteg/
func BenchmarkWarmPoolCreate(b *testing.B) {
	h := newHost(b)
	a, _ := h.agent()
	defer a.Close()
	ctx := context.Background()
	req := h.createReq("unused")
	if err := a.SetPool(ctx, req.Template, req.Resources, 1); err != nil {
		b.Fatal(err)
	}
	var cold, warm []time.Duration
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("bw%03d%s", i%1000, sandbox.NewID()[:8])
		t0 := time.Now()
		if _, err := a.Create(ctx, h.createReq(id)); err != nil {
			b.Fatal(err)
		}
		cold = append(cold, time.Since(t0))
		if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
			b.Fatal(err)
		}

		b.StopTimer()
		waitPoolReady(b, a, "base", 1)
		b.StartTimer()
		t1 := time.Now()
		sb := claim(b, a, req)
		warm = append(warm, time.Since(t1))
		if err := a.Kill(ctx, sb.ID, sandbox.KillRequest); err != nil {
			b.Fatal(err)
		}
	}
	report(b, "cold-create", cold)
	report(b, "warm-create", warm)
}

// TestWarmPoolGoneAtCloseRunsc: a graceful Close of the agent destroys its
// runsc pool members, ready (frozen) and reserved alike: no runsc
// container, cgroup, network namespace, mount or directory of any member
// is left.
func TestWarmPoolGoneAtCloseRunsc(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	ctx := context.Background()
	req := h.createReq("unused")
	if err := a.SetPool(ctx, req.Template, req.Resources, 2); err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, a, "base", 2)
	if _, ok := a.Reserve(req.Template, req.Resources); !ok {
		t.Fatal("no pool member to reserve")
	}
	members, err := drv.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 2 {
		t.Fatalf("runsc containers of the pool: %v, want 2", members)
	}
	a.Close()
	for _, id := range members {
		if left := h.leftovers(drv, id); len(left) > 0 {
			t.Errorf("pool member %s left after a graceful close: %v", id, left)
		}
	}
	// runsc's shared null network namespace is the driver's, not a
	// member's: its clean-up after the last of several concurrent deletes
	// is best effort (see runsc.Driver.cleanNullNetns), so it is not
	// counted here.
	var left []string
	for _, l := range h.leftovers(drv, "") {
		if !strings.HasSuffix(l, "/runsc/runtime/null-netns") {
			left = append(left, l)
		}
	}
	if len(left) > 0 {
		t.Errorf("host objects left after a graceful close: %v", left)
	}
}
