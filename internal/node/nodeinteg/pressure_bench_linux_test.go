package nodeinteg

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// BenchmarkMemoryPressure runs the three memory pressure cases of the
// abuse tests (40 processes of 12 MiB in a 512 MiB sandbox: fresh, resumed
// from a memory snapshot, created from a template snapshot) once per
// iteration, each in a sandbox of its own, and reports how many sandboxes
// lived through it (survived) of how many ran (sandboxes), and how many of
// the 40 processes were killed on average. For a sandbox that died it logs
// the host OOM killer's victims other than stubs (dmesg), the kill order
// of the failing run.
//
//	go test -run '^$' -bench MemoryPressure -benchtime 20x -timeout 90m ./internal/node/nodeinteg/
func BenchmarkMemoryPressure(b *testing.B) {
	h := newHost(b)
	a, _ := h.agent()
	defer a.Close()
	b.Run("fresh", func(b *testing.B) {
		benchPressure(b, h, a, func() (*nodeapi.Sandbox, string) {
			sb, tok := abuseSandbox(b, h, a, "pf", sandbox.Resources{})
			startPressure(b, sb, tok)
			return sb, tok
		})
	})
	b.Run("resumed", func(b *testing.B) {
		benchPressure(b, h, a, func() (*nodeapi.Sandbox, string) {
			sb, tok := abuseSandbox(b, h, a, "pr", sandbox.Resources{})
			startPressure(b, sb, tok)
			if out, _ := runAs(b, sb, tok, "user", "for i in $(seq 600); do [ $(pgrep -c python3) -ge 40 ] && break; sleep 0.2; done; pgrep -c python3"); strings.TrimSpace(out) != "40" {
				b.Fatalf("%q processes running before the pause, want 40", out)
			}
			ctx := context.Background()
			if _, err := a.Pause(ctx, sb.ID, nodeapi.PauseRequest{Memory: true}); err != nil {
				b.Fatal(err)
			}
			r, err := a.Resume(ctx, sb.ID, nodeapi.ResumeRequest{ExecutionID: "e2-" + sb.ID})
			if err != nil {
				b.Fatal(err)
			}
			return r, tok
		})
	})
	b.Run("template", func(b *testing.B) {
		ctx := context.Background()
		tmpl := h.createReq("x").Template
		tmpl.StartCmd = restoredPressure
		dir := filepath.Join(h.dir, "pressure-snapshot")
		if err := a.Snapshot(ctx, tmpl, "test $(pgrep -c python3) -ge 40", dir); err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := a.DeleteSnapshot(context.Background(), dir); err != nil {
				b.Error(err)
			}
		}()
		tmpl.SnapshotDir = dir
		benchPressure(b, h, a, func() (*nodeapi.Sandbox, string) {
			id := "pt" + sandbox.NewID()[:10]
			req := h.createReq(id)
			req.Template = tmpl
			b.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })
			sb, err := a.Create(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			return sb, req.EnvdAccessToken
		})
	})
}

// startPressure starts restoredPressure as the default user in sb.
func startPressure(t testing.TB, sb *nodeapi.Sandbox, tok string) {
	t.Helper()
	if err := node.NewHTTPEnvd(nil).Start(context.Background(), sb.Address, tok, node.EnvdProcess{
		Tag: "pressure", Cmd: "/bin/bash", User: "user", Args: []string{"-c", restoredPressure},
	}); err != nil {
		t.Fatal(err)
	}
}

// benchPressure runs one pressure case per iteration (setup makes the
// sandbox, its 40 processes waiting) and reports the survivals. For a
// sandbox that died it logs the kill order: how many stubs the host's OOM
// killer took and in how long, whether the stub pool was among them (the
// sentry forks no process after that), and each victim that was not a
// stub.
func benchPressure(b *testing.B, h *host, a *node.Agent, setup func() (*nodeapi.Sandbox, string)) {
	var runs, survived, killed int
	// A plain loop: the compiler's treatment of calls inside a b.Loop
	// loop crashes go1.27.3 on this one (internal compiler error).
	for range b.N {
		sb, tok := setup()
		pool := stubPool(b, h, sb.ID)
		before := dmesgLines()
		runs++
		done, err := pressureOutcome(b, a, sb, tok)
		if err != nil {
			b.Logf("run %d: %v", runs, err)
			logKillOrder(b, fmt.Sprintf("run %d", runs), oomKillsSince(before), pool)
		} else {
			survived++
			killed += 40 - done
		}
		_ = a.Kill(context.Background(), sb.ID, sandbox.KillAdmin)
	}
	b.ReportMetric(float64(runs), "sandboxes")
	b.ReportMetric(float64(survived), "survived")
	if survived > 0 {
		b.ReportMetric(float64(killed)/float64(survived), "killed-of-40")
	}
}

// oomKill is one kill of the host's OOM killer, from the kernel log.
type oomKill struct {
	at   float64 // seconds since boot
	pid  string
	stub bool // oom_score_adj 1000
	line string
}

// oomKillsSince returns the OOM kills in the kernel log after the last
// line of before (by time: the log is a ring, its older lines go).
func oomKillsSince(before []string) []oomKill {
	since := -1.0
	if len(before) > 0 {
		since = dmesgTime(before[len(before)-1])
	}
	var out []oomKill
	for _, l := range dmesgLines() {
		_, rest, ok := strings.Cut(l, "Killed process ")
		if !ok || dmesgTime(l) <= since {
			continue
		}
		pid, _, _ := strings.Cut(rest, " ")
		out = append(out, oomKill{at: dmesgTime(l), pid: pid, stub: strings.Contains(l, "oom_score_adj:1000"), line: l})
	}
	return out
}

// dmesgTime is the time of a kernel log line ("[  123.456789] ..."), or -1.
func dmesgTime(l string) float64 {
	ts, _, ok := strings.Cut(strings.TrimPrefix(l, "["), "]")
	if !ok {
		return -1
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(ts), 64)
	if err != nil {
		return -1
	}
	return f
}

// logKillOrder logs kills: the stubs taken (and in how long), when the
// stub pool pool was, and each victim that was not a stub.
func logKillOrder(t testing.TB, what string, kills []oomKill, pool string) {
	t.Helper()
	stubs := 0
	for i, k := range kills {
		switch {
		case k.pid == pool:
			stubs++
			t.Logf("%s: the stub pool (pid %s) killed as stub %d, %.3f s after the first kill", what, pool, stubs, k.at-kills[0].at)
		case k.stub:
			stubs++
		default:
			t.Logf("%s: after %d stubs in %.3f s: %s", what, stubs, k.at-kills[0].at, k.line)
		}
		if i == len(kills)-1 {
			t.Logf("%s: %d OOM kills in %.3f s, %d of them stubs", what, len(kills), k.at-kills[0].at, stubs)
		}
	}
}

// stubPool returns the pid of the stub pool of sandbox id, the process
// that forks a stub for each new guest address space: the oldest process
// of the sandbox's host cgroup whose parent is in the cgroup too (as
// internal/driver/runsc finds it).
func stubPool(t testing.TB, h *host, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", h.cgRoot, sandbox.HostName(id), "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	procs := strings.Fields(string(b))
	var pool string
	var poolStart uint64
	for _, p := range procs {
		stat, err := os.ReadFile("/proc/" + p + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 20 || !slices.Contains(procs, f[1]) {
			continue
		}
		start, _ := strconv.ParseUint(f[19], 10, 64)
		if pool == "" || start < poolStart {
			pool, poolStart = p, start
		}
	}
	return pool
}

// dmesgLines returns the kernel log's lines (none when dmesg fails).
func dmesgLines() []string {
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
