package nodeinteg

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Paused sandboxes that keep their host objects (node keep.go).

// hasKinds reports whether left (h.leftovers) names an object of every
// kind ("runsc", "cgroup", "netns", "mount", "dir", ...).
func hasKinds(left []string, kinds ...string) bool {
	for _, k := range kinds {
		found := false
		for _, l := range left {
			if strings.HasPrefix(l, k+" ") {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// onlyDirs reports whether left holds nothing but directories (a paused
// sandbox that released its objects: state dir and layer).
func onlyDirs(left []string) bool {
	for _, l := range left {
		if !strings.HasPrefix(l, "dir ") {
			return false
		}
	}
	return len(left) > 0
}

// memSandbox creates sandbox id with a counter in memory and a file in
// /tmp (the guest's tmpfs: only a memory image keeps it).
func memSandbox(t *testing.T, h *host, a *node.Agent, id string) *nodeapi.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb, err := a.Create(ctx, h.createReq(id))
	if err != nil {
		t.Fatal(err)
	}
	tok := "tok-" + id
	if err := node.NewHTTPEnvd(nil).Start(ctx, sb.Address, tok, node.EnvdProcess{
		Tag: "counter", Cmd: "/bin/bash", User: "user",
		Args: []string{"-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new && mv /tmp/counter.new /tmp/counter; sleep 0.05; done"},
	}); err != nil {
		t.Fatal(err)
	}
	run(t, sb, tok, "echo in-memory-"+id+" > /tmp/mark")
	waitCounterAbove(t, sb, tok, 3)
	return sb
}

// checkMemory checks that resumed sandbox sb continues from a counter of
// at least before and still has its /tmp file.
func checkMemory(t *testing.T, sb *nodeapi.Sandbox, before int) {
	t.Helper()
	// A resume into the kept slot has the address of before the pause:
	// connections pooled then were reset by the restored guest.
	http1Client.CloseIdleConnections()
	tok := "tok-" + sb.ID
	after := counter(t, sb, tok)
	if after < before {
		t.Errorf("%s: counter went back from %d to %d: memory not kept", sb.ID, before, after)
	}
	waitCounterAbove(t, sb, tok, after)
	if out, _ := run(t, sb, tok, "cat /tmp/mark"); strings.TrimSpace(out) != "in-memory-"+sb.ID {
		t.Errorf("%s: /tmp/mark after resume = %q", sb.ID, out)
	}
}

// resumedPrepared reports whether tap's last "sandbox resumed" line says
// the resume went into a prepared container.
func resumedPrepared(t *testing.T, tap *logTap) bool {
	t.Helper()
	lines := tap.take("sandbox resumed")
	if len(lines) != 1 {
		t.Fatalf("resume log lines: %q, want one", lines)
	}
	return strings.Contains(lines[0], " prepared=true")
}

// eventuallyReleased waits (bounded) until paused sandbox id no longer
// keeps its host objects.
func eventuallyReleased(t *testing.T, a *node.Agent, id string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		kept, err := a.HostObjectsKept(id)
		if err != nil {
			t.Fatal(err)
		}
		if !kept {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still keeps its host objects", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPauseKeepsHostObjects: a pause with memory keeps the sandbox's
// container (prepared), cgroup, netns and mount; the resume restores
// into them (no new slot: the same address) and the memory is there; a
// kill then leaves nothing.
func TestPauseKeepsHostObjects(t *testing.T) {
	h := newHost(t)
	tap := &logTap{}
	h.logs = io.MultiWriter(h.logs, tap)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	id := "kp" + sandbox.NewID()[:10]
	t.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })
	sb := memSandbox(t, h, a, id)
	before := counter(t, sb, "tok-"+id)
	pauseMemory(t, a, id)
	mustKeep(t, a, id)
	left := h.leftovers(drv, id)
	if !hasKinds(left, "runsc", "cgroup", "netns", "mount", "dir") {
		t.Errorf("host objects of the paused sandbox: %v, want its container, cgroup, netns, mount and dirs", left)
	}
	if st, err := drv.Status(ctx, id); err != nil || st.State != driver.StateCreated {
		t.Errorf("runtime container of the paused sandbox: %+v, %v; want created", st, err)
	}
	tap.take("sandbox resumed")
	r, err := a.Resume(ctx, id, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !resumedPrepared(t, tap) {
		t.Error("the resume did not restore into the prepared container")
	}
	if r.Address != sb.Address {
		t.Errorf("address after resume %s, want the kept slot's %s", r.Address, sb.Address)
	}
	checkMemory(t, r, before)
	// A second pause and resume goes the same way.
	pauseMemory(t, a, id)
	if r, err = a.Resume(ctx, id, nodeapi.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	if !resumedPrepared(t, tap) {
		t.Error("the second resume did not restore into the prepared container")
	}
	checkMemory(t, r, before)
	if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if left := h.leftovers(drv, id); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}
}

// TestResumeDuringPreparation: a resume right after the pause answered
// (its preparation in flight) waits for it and restores.
func TestResumeDuringPreparation(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	id, before := countedSandbox(t, h, a, "kr")
	for range 2 {
		pauseMemory(t, a, id)
		r, err := a.Resume(ctx, id, nodeapi.ResumeRequest{})
		if err != nil {
			t.Fatal(err)
		}
		checkMemory(t, r, before)
	}
	if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if left := h.leftovers(drv, id); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}
}

// TestKeepEvictedByCount: with room for one, the second pause releases
// the first sandbox's objects; it still resumes, the slow way.
func TestKeepEvictedByCount(t *testing.T) {
	h := newHost(t)
	h.tune = func(c *node.Config) { c.KeepPaused = 1 }
	tap := &logTap{}
	h.logs = io.MultiWriter(h.logs, tap)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	ids := []string{"ka" + sandbox.NewID()[:10], "kb" + sandbox.NewID()[:10]}
	var sbs []*nodeapi.Sandbox
	for _, id := range ids {
		t.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })
		sbs = append(sbs, memSandbox(t, h, a, id))
	}
	before := counter(t, sbs[0], "tok-"+ids[0])
	for _, id := range ids {
		pauseMemory(t, a, id)
		if kept, err := a.HostObjectsKept(id); err != nil || !kept {
			t.Fatalf("%s: HostObjectsKept = %v, %v; want true", id, kept, err)
		}
	}
	eventuallyReleased(t, a, ids[0])
	if left := h.leftovers(drv, ids[0]); !onlyDirs(left) {
		t.Errorf("host objects of the evicted sandbox: %v, want only its dirs", left)
	}
	if left := h.leftovers(drv, ids[1]); !hasKinds(left, "runsc", "cgroup", "netns", "mount") {
		t.Errorf("host objects of the newest paused sandbox: %v, want them kept", left)
	}
	tap.take("sandbox resumed")
	r, err := a.Resume(ctx, ids[0], nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resumedPrepared(t, tap) {
		t.Error("the evicted sandbox resumed into a prepared container")
	}
	checkMemory(t, r, before)
}

// TestKeepEvictedByTime: the kept objects go once KeepPausedFor is up;
// the sandbox then resumes the slow way with its memory.
func TestKeepEvictedByTime(t *testing.T) {
	h := newHost(t)
	h.tune = func(c *node.Config) { c.KeepPausedFor = time.Second }
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	id, before := countedSandbox(t, h, a, "kt")
	pauseMemory(t, a, id)
	eventuallyReleased(t, a, id)
	if left := h.leftovers(drv, id); !onlyDirs(left) {
		t.Errorf("host objects after the keep's time: %v, want only its dirs", left)
	}
	r, err := a.Resume(ctx, id, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	checkMemory(t, r, before)
}

// TestKillKeptPaused: a kill of a paused sandbox that keeps its objects
// (prepared, or with its preparation in flight) leaves nothing.
func TestKillKeptPaused(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	for _, wait := range []bool{true, false} {
		id := "kk" + sandbox.NewID()[:10]
		t.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })
		if _, err := a.Create(ctx, h.createReq(id)); err != nil {
			t.Fatal(err)
		}
		pauseMemory(t, a, id)
		if wait {
			mustKeep(t, a, id)
		}
		if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
		if left := h.leftovers(drv, id); len(left) > 0 {
			t.Errorf("left after kill (preparation awaited: %v): %v", wait, left)
		}
	}
}

// TestKeptReleasedAtClose: Close releases the kept objects; a new agent
// resumes the sandbox the slow way with its memory.
func TestKeptReleasedAtClose(t *testing.T) {
	h := newHost(t)
	a1, drv := h.agent()
	ctx := context.Background()
	id := "kc" + sandbox.NewID()[:10]
	sb := memSandbox(t, h, a1, id)
	before := counter(t, sb, "tok-"+id)
	pauseMemory(t, a1, id)
	a1.Close()
	if left := h.leftovers(drv, id); !onlyDirs(left) {
		t.Errorf("host objects after Close: %v, want only its dirs", left)
	}
	a2, _ := h.agent()
	defer a2.Close()
	t.Cleanup(func() { _ = a2.Kill(context.Background(), id, sandbox.KillAdmin) })
	r, err := a2.Resume(ctx, id, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	checkMemory(t, r, before)
}

// TestKeptAfterAgentSIGKILL: an agent killed with SIGKILL while a paused
// sandbox keeps its objects (its container prepared) is replaced by a new
// agent on the same data dir, which reclaims the container, cgroup, netns
// and mount, keeps the sandbox paused with its image, and resumes it with
// its memory.
func TestKeptAfterAgentSIGKILL(t *testing.T) {
	h := newHost(t)
	h.agents = 1 // the clean-up agent must run
	ctx := context.Background()
	cmd, c := h.startAgentProcess(t)
	id := "ks" + sandbox.NewID()[:10]
	tok := "tok-" + id
	sb, err := c.Create(ctx, h.createReq(id))
	if err != nil {
		t.Fatal(err)
	}
	run(t, sb, tok, "echo in-memory-"+id+" > /tmp/mark")
	pauseMemory(t, c, id)
	// Wait (bounded) for the prepared container: runsc lists it created.
	root := filepath.Join(h.dir, "runsc", "runtime")
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := exec.Command(h.runsc, "--root", root, "list").Output()
		if strings.Contains(string(out), id) && strings.Contains(string(out), "created") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no prepared container of %s: runsc list %q", id, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	a, drv := h.agent()
	defer a.Close()
	got, err := a.Get(ctx, id)
	if err != nil || got.State != sandbox.StatePaused || !got.PausedWithMemory {
		t.Fatalf("after SIGKILL and restart: %+v, %v; want paused with memory", got, err)
	}
	if kept, err := a.HostObjectsKept(id); err != nil || kept {
		t.Errorf("HostObjectsKept after restart = %v, %v; want false", kept, err)
	}
	if left := h.leftovers(drv, id); !onlyDirs(left) {
		t.Errorf("host objects after restart: %v, want only its dirs", left)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "node", "sandboxes", sandbox.HostName(id), "snapshot", "checkpoint.img")); err != nil {
		t.Errorf("memory image after restart: %v", err)
	}
	t.Logf("reclaimed after SIGKILL: %v", a.Reclaimed())
	for _, k := range []string{node.KindContainer, node.KindCgroup, node.KindNetwork} {
		if a.Reclaimed()[k] == 0 {
			t.Errorf("reclaimed %v: no %s", a.Reclaimed(), k)
		}
	}
	r, err := a.Resume(ctx, id, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, r, tok, "cat /tmp/mark"); strings.TrimSpace(out) != "in-memory-"+id {
		t.Errorf("/tmp/mark after resume = %q", out)
	}
	if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if left := h.leftovers(drv, ""); len(left) > 0 {
		t.Errorf("left on the host: %v", left)
	}
}

// TestKeepNoneWhenMemoryLow: a pause while the host's available memory
// is below the floor keeps nothing and releases what others kept.
func TestKeepNoneWhenMemoryLow(t *testing.T) {
	h := newHost(t)
	var low atomic.Bool
	h.tune = func(c *node.Config) {
		c.KeepPausedMinFreeMemory = 1 << 30
		c.FreeMemory = func() (uint64, error) {
			if low.Load() {
				return 1 << 20, nil
			}
			return 8 << 30, nil
		}
	}
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	ids := []string{"ma" + sandbox.NewID()[:10], "mb" + sandbox.NewID()[:10]}
	for _, id := range ids {
		t.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })
		if _, err := a.Create(ctx, h.createReq(id)); err != nil {
			t.Fatal(err)
		}
	}
	pauseMemory(t, a, ids[0])
	if kept, err := a.HostObjectsKept(ids[0]); err != nil || !kept {
		t.Fatalf("HostObjectsKept with memory to spare = %v, %v; want true", kept, err)
	}
	low.Store(true)
	pauseMemory(t, a, ids[1])
	if kept, err := a.HostObjectsKept(ids[1]); err != nil || kept {
		t.Errorf("HostObjectsKept of a pause while memory is low = %v, %v; want false", kept, err)
	}
	eventuallyReleased(t, a, ids[0])
	for _, id := range ids {
		if left := h.leftovers(drv, id); !onlyDirs(left) {
			t.Errorf("%s: host objects while memory is low: %v, want only its dirs", id, left)
		}
		if _, err := a.Resume(ctx, id, nodeapi.ResumeRequest{}); err != nil {
			t.Errorf("%s: resume: %v", id, err)
		}
	}
}

// TestResumeFallsBackWhenPreparedGone: when the prepared container is
// gone (deleted behind the agent's back), the resume releases the kept
// objects and resumes the slow way, with its memory.
func TestResumeFallsBackWhenPreparedGone(t *testing.T) {
	h := newHost(t)
	tap := &logTap{}
	h.logs = io.MultiWriter(h.logs, tap)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	id, before := countedSandbox(t, h, a, "kf")
	pauseMemory(t, a, id)
	mustKeep(t, a, id)
	if err := drv.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	tap.take("sandbox resumed")
	r, err := a.Resume(ctx, id, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resumedPrepared(t, tap) {
		t.Error("resumed into a prepared container that was deleted")
	}
	checkMemory(t, r, before)
	if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if left := h.leftovers(drv, id); len(left) > 0 {
		t.Errorf("left after kill: %v", left)
	}
}

// countedSandbox makes a sandbox on a (its ID prefix and a new ID), killed
// at the test's end, whose memory counter (memSandbox) it reads.
func countedSandbox(t *testing.T, h *host, a *node.Agent, prefix string) (id string, before int) {
	t.Helper()
	id = prefix + sandbox.NewID()[:10]
	t.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })
	return id, counter(t, memSandbox(t, h, a, id), "tok-"+id)
}

// pauseMemory pauses id on a (an agent or a node client) with its memory.
func pauseMemory(t *testing.T, a nodeapi.Service, id string) {
	t.Helper()
	if _, err := a.Pause(context.Background(), id, nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatal(err)
	}
}

// mustKeep fails the test unless id keeps its host objects.
func mustKeep(t *testing.T, a *node.Agent, id string) {
	t.Helper()
	if kept, err := a.HostObjectsKept(id); err != nil || !kept {
		t.Fatalf("%s: HostObjectsKept = %v, %v; want true", id, kept, err)
	}
}
