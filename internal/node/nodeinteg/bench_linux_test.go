package nodeinteg

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
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

// BenchmarkPauseResume: pause with memory and resume of an idle sandbox.
//
//	go test -run '^$' -bench PauseResume -benchtime 20x ./internal/node/nodeinteg/
func BenchmarkPauseResume(b *testing.B) {
	h := newHost(b)
	a, _ := h.agent()
	defer a.Close()
	ctx := context.Background()
	id := "bp" + sandbox.NewID()[:10]
	if _, err := a.Create(ctx, h.createReq(id)); err != nil {
		b.Fatal(err)
	}
	defer a.Kill(context.Background(), id, sandbox.KillRequest)
	var pauses, resumes []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := a.Pause(ctx, id, node.PauseRequest{Memory: true}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := a.Resume(ctx, id, node.ResumeRequest{}); err != nil {
			b.Fatal(err)
		}
		pauses, resumes = append(pauses, t1.Sub(t0)), append(resumes, time.Since(t1))
	}
	report(b, "pause", pauses)
	report(b, "resume", resumes)
}

// BenchmarkFork10: fork a running sandbox into 10 copies (then kill them).
//
//	go test -run '^$' -bench Fork10 -benchtime 3x ./internal/node/nodeinteg/
func BenchmarkFork10(b *testing.B) {
	h := newHost(b)
	a, _ := h.agent()
	defer a.Close()
	ctx := context.Background()
	id := "bf" + sandbox.NewID()[:10]
	if _, err := a.Create(ctx, h.createReq(id)); err != nil {
		b.Fatal(err)
	}
	defer a.Kill(context.Background(), id, sandbox.KillRequest)
	var forks []time.Duration
	lost := 0
	for b.Loop() {
		ids := make([]string, 10)
		for i := range ids {
			ids[i] = fmt.Sprintf("k%d%s", i, sandbox.NewID()[:10])
		}
		t0 := time.Now()
		if _, err := a.Fork(ctx, id, node.ForkRequest{IDs: ids}); err != nil {
			b.Fatal(err)
		}
		forks = append(forks, time.Since(t0))
		for _, k := range ids {
			if err := a.Kill(ctx, k, sandbox.KillRequest); errdefs.IsNotFound(err) {
				lost++ // it stopped by itself meanwhile
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
	report(b, "fork10", forks)
	b.ReportMetric(float64(lost), "copies-lost")
}
