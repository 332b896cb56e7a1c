package drivertest

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
)

// Benchmarks shared by the drivers. Each reports p50 and p99 of one
// operation in milliseconds (b.ReportMetric), so that runsc and runc print
// comparable figures in the same run:
//
//	go test -run '^$' -bench . -benchtime 20x ./internal/driver/runsc ./internal/driver/runc

// report adds p50/p99 (ms) of ds to b's output.
func report(b *testing.B, ds []time.Duration) { reportAs(b, "", ds) }

// reportAs is report with a prefix on the metric names.
func reportAs(b *testing.B, prefix string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	pct := func(p float64) float64 {
		i := int(p*float64(len(ds)-1) + 0.5)
		return float64(ds[i].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), prefix+"p50-ms")
	b.ReportMetric(pct(0.99), prefix+"p99-ms")
}

func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// BenchStartDelete measures Start (until init runs) plus Delete of a
// sandbox whose init is a shell loop.
func BenchStartDelete(b *testing.B, h Harness) {
	ctx := benchCtx(b)
	var ds, starts, deletes []time.Duration
	for b.Loop() {
		sp := h.NewSpec(b, SpecOptions{})
		sp.Init = driver.Process{Args: loopInit}
		t0 := time.Now()
		if err := h.Driver.Start(ctx, sp); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := h.Driver.Delete(ctx, sp.ID); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		starts = append(starts, t1.Sub(t0))
		deletes = append(deletes, time.Since(t1))
	}
	report(b, ds)
	reportAs(b, "start-", starts)
	reportAs(b, "delete-", deletes)
}

// BenchExec measures the round trip of Exec("true") in a running sandbox.
func BenchExec(b *testing.B, h Harness) {
	ctx := benchCtx(b)
	sp := h.NewSpec(b, SpecOptions{})
	sp.Init = driver.Process{Args: loopInit}
	if err := h.Driver.Start(ctx, sp); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Driver.Delete(context.Background(), sp.ID) })
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		code, err := h.Driver.Exec(ctx, sp.ID, driver.Process{Args: []string{"true"}, Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || code != 0 {
			b.Fatalf("exec: %d, %v", code, err)
		}
		ds = append(ds, time.Since(t0))
	}
	report(b, ds)
}

// BenchCheckpoint measures Checkpoint with LeaveRunning (the fork and
// snapshot case) of an idle counting sandbox.
func BenchCheckpoint(b *testing.B, h Harness) {
	c, ok := h.Driver.(driver.Checkpointer)
	if !ok || !h.Driver.Capabilities().MemoryCheckpoint {
		b.Skip("the driver has no memory checkpoint")
	}
	ctx := benchCtx(b)
	sp := h.NewSpec(b, SpecOptions{})
	sp.Init = driver.Process{Args: counterInit}
	if err := h.Driver.Start(ctx, sp); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Driver.Delete(context.Background(), sp.ID) })
	base := b.TempDir()
	var ds []time.Duration
	n := 0
	for b.Loop() {
		n++
		dir := filepath.Join(base, fmt.Sprint(n))
		t0 := time.Now()
		if err := c.Checkpoint(ctx, sp.ID, dir, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	report(b, ds)
}

// BenchRestore measures Restore of an idle counting sandbox's image as a
// new sandbox (until it runs); Delete is outside the timing.
func BenchRestore(b *testing.B, h Harness) {
	c, ok := h.Driver.(driver.Checkpointer)
	if !ok || !h.Driver.Capabilities().MemoryCheckpoint {
		b.Skip("the driver has no memory checkpoint")
	}
	ctx := benchCtx(b)
	src := h.NewSpec(b, SpecOptions{})
	src.Init = driver.Process{Args: counterInit}
	if err := h.Driver.Start(ctx, src); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Driver.Delete(context.Background(), src.ID) })
	dir := filepath.Join(b.TempDir(), "image")
	// The image and the writable layer must match: checkpoint the source
	// for good (it no longer writes) and clone its layer afterwards.
	if err := c.Checkpoint(ctx, src.ID, dir, driver.CheckpointOptions{}); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for b.Loop() {
		sp := h.NewSpec(b, SpecOptions{CloneFrom: &src})
		sp.Init = src.Init
		t0 := time.Now()
		if err := c.Restore(ctx, sp, dir); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		if err := h.Driver.Delete(ctx, sp.ID); err != nil {
			b.Fatal(err)
		}
	}
	report(b, ds)
}
