package lifecycle_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// BenchmarkCreate measures what lifecycle.Create adds around the node's
// create (the fake node answers at once) with a team concurrency limit:
// the store's writes, on a real SQLite file and, when a test server is
// configured, Postgres; for a Manager of one node (warren serve) and of
// every node (the API role, which keeps its starting row). The Manager
// runs with the route cache's change feed, as in both roles. It reports p50 and p99; each
// created sandbox is killed outside the timing.
func BenchmarkCreate(b *testing.B) {
	stores := map[string]func(testing.TB) *store.SQL{"sqlite": storetest.SQLite}
	if storetest.PostgresAvailable() {
		stores["postgres"] = storetest.Postgres
	}
	for name, open := range stores {
		for _, allNodes := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/all_nodes=%t", name, allNodes), func(b *testing.B) {
				benchCreate(b, open(b), allNodes)
			})
		}
	}
}

func benchCreate(b *testing.B, st *store.SQL, allNodes bool) {
	m, err := lifecycle.New(lifecycle.Config{Store: st, Node: fakenode.New(), AllNodes: allNodes,
		SandboxChanges: st.WatchSandboxes, Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(100 * time.Millisecond) // the change feed goes live
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
