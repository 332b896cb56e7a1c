package lifecycle_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// BenchmarkCreate measures what lifecycle.Create adds around the node's
// create (the fake node answers at once) on a real SQLite file, with the
// default team concurrency limit: the store's writes. It reports p50 and
// p99; each created sandbox is killed outside the timing.
func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	m, err := lifecycle.New(lifecycle.Config{Store: storetest.SQLite(b), Node: fakenode.New(), Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	p := lifecycle.CreateParams{TeamID: "team", Template: nodeapi.Template{ID: "base"}, Timeout: time.Hour, MaxConcurrent: 20}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		sb, err := m.Create(ctx, p)
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := m.Kill(ctx, "team", sb.ID, sandbox.KillRequest); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
