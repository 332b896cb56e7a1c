package nodeinteg

import (
	"context"
	"os/exec"
	"path/filepath"
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
		benchPressure(b, a, func() (*nodeapi.Sandbox, string) {
			sb, tok := abuseSandbox(b, h, a, "pf", sandbox.Resources{})
			startPressure(b, sb, tok)
			return sb, tok
		})
	})
	b.Run("resumed", func(b *testing.B) {
		benchPressure(b, a, func() (*nodeapi.Sandbox, string) {
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
		benchPressure(b, a, func() (*nodeapi.Sandbox, string) {
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
// sandbox, its 40 processes waiting) and reports the survivals.
func benchPressure(b *testing.B, a *node.Agent, setup func() (*nodeapi.Sandbox, string)) {
	var runs, survived, killed int
	// A plain loop: the compiler's treatment of calls inside a b.Loop
	// loop crashes go1.27.3 on this one (internal compiler error).
	for range b.N {
		sb, tok := setup()
		before := dmesgLines()
		runs++
		done, err := pressureOutcome(b, a, sb, tok)
		if err != nil {
			b.Logf("run %d: %v", runs, err)
			stubs := 0
			for _, l := range dmesgSince(before) {
				switch {
				case !strings.Contains(l, "Killed process"):
				case strings.Contains(l, "oom_score_adj:1000"):
					stubs++
				default:
					b.Logf("run %d: dmesg, after %d stubs: %s", runs, stubs, l)
				}
			}
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

// dmesgSince returns the kernel log's lines after the last of before.
func dmesgSince(before []string) []string {
	after := dmesgLines()
	if len(before) == 0 {
		return after
	}
	last := before[len(before)-1]
	for i := len(after) - 1; i >= 0; i-- {
		if after[i] == last {
			return after[i+1:]
		}
	}
	return after
}

// dmesgLines returns the kernel log's lines (none when dmesg fails).
func dmesgLines() []string {
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
