package nodeinteg

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// report adds the median and 99th percentile of ds to b's figures.
func report(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	p := func(q float64) float64 {
		return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Microseconds()) / 1000
	}
	b.ReportMetric(p(0.50), name+"-p50-ms")
	b.ReportMetric(p(0.99), name+"-p99-ms")
}

// BenchmarkColdStart: create (runsc start, envd /init, ready) and kill.
//
//	go test -run '^$' -bench ColdStart -benchtime 20x ./internal/node/nodeinteg/
func BenchmarkColdStart(b *testing.B) {
	h := newHost(b)
	a, _ := h.agent()
	defer a.Close()
	ctx := context.Background()
	var creates, kills []time.Duration
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("bc%03d%s", i%1000, sandbox.NewID()[:8])
		t0 := time.Now()
		if _, err := a.Create(ctx, h.createReq(id)); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
			b.Fatal(err)
		}
		creates, kills = append(creates, t1.Sub(t0)), append(kills, time.Since(t1))
	}
	report(b, "create", creates)
	report(b, "kill", kills)
}

// BenchmarkPauseResume: pause with memory and resume of an idle sandbox,
// and each phase of both from the agent's log lines (pause-<phase>,
// prepare-<phase> for the kept sandbox's preparation after the pause,
// resume-<phase>). Each resume starts once the preparation is done.
//
//	go test -run '^$' -bench PauseResume -benchtime 20x ./internal/node/nodeinteg/
func BenchmarkPauseResume(b *testing.B) {
	h := newHost(b)
	tap := &logTap{}
	h.logs = tap
	a, _ := h.agent()
	defer a.Close()
	ctx := context.Background()
	id := "bp" + sandbox.NewID()[:10]
	if _, err := a.Create(ctx, h.createReq(id)); err != nil {
		b.Fatal(err)
	}
	defer a.Kill(context.Background(), id, sandbox.KillRequest)
	var pauses, resumes []time.Duration
	var pauseLines, prepLines, resumeLines []string
	for b.Loop() {
		t0 := time.Now()
		if _, err := a.Pause(ctx, id, nodeapi.PauseRequest{Memory: true}); err != nil {
			b.Fatal(err)
		}
		pause := time.Since(t0)
		// A resume comes a while after its pause: the preparation of the
		// kept sandbox (node keep.go) is done by then. Untimed.
		if _, err := a.HostObjectsKept(id); err != nil {
			b.Fatal(err)
		}
		got := tap.takeEach("sandbox paused", "paused sandbox prepared for resume")
		pauseLines, prepLines = append(pauseLines, got[0]...), append(prepLines, got[1]...)
		t1 := time.Now()
		if _, err := a.Resume(ctx, id, nodeapi.ResumeRequest{}); err != nil {
			b.Fatal(err)
		}
		pauses, resumes = append(pauses, pause), append(resumes, time.Since(t1))
		resumeLines = append(resumeLines, tap.take("sandbox resumed")...)
	}
	report(b, "pause", pauses)
	report(b, "resume", resumes)
	reportPhases(b, "pause", pauseLines)
	reportPhases(b, "prepare", prepLines)
	reportPhases(b, "resume", resumeLines)
}

// BenchmarkFork10: fork a running sandbox into 10 copies (then kill them),
// and each phase of the fork (fork10-<phase>).
//
//	go test -run '^$' -bench Fork10 -benchtime 3x ./internal/node/nodeinteg/
func BenchmarkFork10(b *testing.B) {
	h := newHost(b)
	tap := &logTap{}
	h.logs = tap
	a, _ := h.agent()
	defer a.Close()
	ctx := context.Background()
	id := "bf" + sandbox.NewID()[:10]
	if _, err := a.Create(ctx, h.createReq(id)); err != nil {
		b.Fatal(err)
	}
	defer a.Kill(context.Background(), id, sandbox.KillRequest)
	var forks []time.Duration
	var lines []string
	lost := 0
	for b.Loop() {
		ids := make([]string, 10)
		for i := range ids {
			ids[i] = fmt.Sprintf("k%d%s", i, sandbox.NewID()[:10])
		}
		t0 := time.Now()
		if _, err := a.Fork(ctx, id, nodeapi.ForkRequest{IDs: ids}); err != nil {
			b.Fatal(err)
		}
		forks = append(forks, time.Since(t0))
		lines = append(lines, tap.take("sandbox forked")...)
		for _, k := range ids {
			if err := a.Kill(ctx, k, sandbox.KillRequest); errdefs.IsNotFound(err) {
				lost++ // it stopped by itself meanwhile
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
	report(b, "fork10", forks)
	reportPhases(b, "fork10", lines)
	b.ReportMetric(float64(lost), "copies-lost")
}

// BenchmarkSnapshotCreate: create from a template's memory snapshot (a
// restore) beside a cold start of the same template, alternating in one
// run so both see the same machine load. The template's start command is a
// small Python server; "create" is Create returning (envd answers), "ready"
// is until the template's ready command passes (the server answers), which
// a cold start only reaches after Create has returned.
//
//	go test -run '^$' -bench SnapshotCreate -benchtime 20x ./internal/node/nodeinteg/
func BenchmarkSnapshotCreate(b *testing.B) {
	h := newHost(b)
	a, _ := h.agent()
	defer a.Close()
	ctx := context.Background()
	const readyCmd = "curl -sf http://127.0.0.1:8000/ >/dev/null"
	tmpl := h.createReq("x").Template
	tmpl.StartCmd = "python3 -m http.server 8000 --bind 127.0.0.1"
	dir := filepath.Join(h.dir, "bench-snapshot")
	if err := a.Snapshot(ctx, tmpl, readyCmd, dir); err != nil {
		b.Fatal(err)
	}
	defer a.DeleteSnapshot(context.Background(), dir)
	snap := tmpl
	snap.SnapshotDir = dir
	type figures struct{ create, ready []time.Duration }
	var restored, cold figures
	for i := 0; b.Loop(); i++ {
		for _, c := range []struct {
			t   nodeapi.Template
			out *figures
		}{{snap, &restored}, {tmpl, &cold}} {
			id := fmt.Sprintf("bs%03d%s", i%1000, sandbox.NewID()[:8])
			req := h.createReq(id)
			req.Template = c.t
			t0 := time.Now()
			sb, err := a.Create(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			c.out.create = append(c.out.create, time.Since(t0))
			for {
				if _, code := run(b, sb, req.EnvdAccessToken, readyCmd); code == 0 {
					break
				}
				if time.Since(t0) > time.Minute {
					b.Fatalf("sandbox %s: not ready after a minute", id)
				}
				time.Sleep(20 * time.Millisecond)
			}
			c.out.ready = append(c.out.ready, time.Since(t0))
			if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
				b.Fatal(err)
			}
		}
	}
	report(b, "snapshot-create", restored.create)
	report(b, "snapshot-ready", restored.ready)
	report(b, "cold-create", cold.create)
	report(b, "cold-ready", cold.ready)
}
