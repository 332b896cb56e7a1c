package store_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// TestCreateSandboxWithinAcrossHandles: two handles on one database (two
// API replicas) create sandboxes of one team at once; together they never
// exceed the team's limit.
func TestCreateSandboxWithinAcrossHandles(t *testing.T) {
	t.Parallel()
	pairs := map[string]func(t *testing.T) (store.Store, store.Store){
		"sqlite": func(t *testing.T) (store.Store, store.Store) {
			path := filepath.Join(t.TempDir(), "warren.db")
			open := func() store.Store {
				s, err := store.OpenSQLite(context.Background(), path, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
			return open(), open()
		},
		"postgres": func(t *testing.T) (store.Store, store.Store) {
			dsn := storetest.PostgresSchema(t)
			return storetest.OpenPostgres(t, dsn), storetest.OpenPostgres(t, dsn)
		},
	}
	for name, pair := range pairs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, b := pair(t)
			ctx := context.Background()
			const limit, perHandle = 5, 20
			// Another team's sandboxes and this team's killed ones do not count.
			for i, sb := range []*store.Sandbox{
				newSandbox("other", "t2", sandbox.StateRunning, time.Now()),
				newSandbox("gone", "t1", sandbox.StateKilled, time.Now()),
			} {
				if err := a.CreateSandbox(ctx, sb); err != nil {
					t.Fatalf("seed %d: %v", i, err)
				}
			}
			var ok, full atomic.Int32
			var wg sync.WaitGroup
			for h, s := range []store.Store{a, b} {
				for i := range perHandle {
					wg.Go(func() {
						sb := newSandbox(fmt.Sprintf("h%d-%d", h, i), "t1", sandbox.StateStarting, time.Now())
						switch err := s.CreateSandboxWithin(ctx, sb, limit, store.ActiveStates...); {
						case err == nil:
							ok.Add(1)
						case errdefs.IsExhausted(err):
							full.Add(1)
						default:
							t.Errorf("create %s: %v", sb.ID, err)
						}
					})
				}
			}
			wg.Wait()
			if ok.Load() != limit || full.Load() != 2*perHandle-limit {
				t.Errorf("%d created, %d refused; want %d and %d", ok.Load(), full.Load(), limit, 2*perHandle-limit)
			}
			if n, err := b.CountSandboxes(ctx, "t1", store.ActiveStates...); err != nil || n != limit {
				t.Errorf("active sandboxes of the team: %d, %v; want %d", n, err, limit)
			}
		})
	}
}
