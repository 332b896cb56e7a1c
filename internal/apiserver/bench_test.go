package apiserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/lifecycle/fakenode"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
)

// BenchmarkGetSandbox measures the API's own overhead for
// GET /sandboxes/{id} on loopback (authentication, a store read, JSON),
// with SQLite and, when available, Postgres. It reports p50 and p99.
func BenchmarkGetSandbox(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			var st *store.SQL
			if backend == "sqlite" {
				st = storetest.SQLite(b)
			} else {
				st = storetest.Postgres(b)
			}
			ctx := context.Background()
			lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: fakenode.New()})
			if err != nil {
				b.Fatal(err)
			}
			if err := st.CreateTeam(ctx, &store.Team{ID: "t"}); err != nil {
				b.Fatal(err)
			}
			key, _, err := apiserver.AddKey(ctx, st, "t", "bench", "")
			if err != nil {
				b.Fatal(err)
			}
			api, err := apiserver.New(apiserver.Config{Store: st, Lifecycle: lc, Templates: staticTemplates{}})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(api)
			defer srv.Close()
			c := client.New(srv.URL, key)
			c.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
			if err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if _, err := c.Get(ctx, sb.SandboxID); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
