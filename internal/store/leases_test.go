package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// TestLease: of two holders one gets the lease; the other gets it only
// once it has expired, and the first then has lost it; a release frees it
// at once; pokes count up for the holder.
func TestLease(t *testing.T) {
	t.Parallel()
	for name, open := range storetest.Processes() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, b := open(t)
			ctx := context.Background()
			t0 := time.Unix(1_800_000_000, 0)
			ttl := 10 * time.Second
			acquire := func(s *store.SQL, holder string, at time.Time, want bool) {
				t.Helper()
				got, _, err := s.AcquireLease(ctx, "leader", holder, at, ttl)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("%s acquires at t0+%s: %v, want %v", holder, at.Sub(t0), got, want)
				}
			}
			holder := func(at time.Time, want string) {
				t.Helper()
				got, err := b.LeaseHolder(ctx, "leader", at)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("holder at t0+%s: %q, want %q", at.Sub(t0), got, want)
				}
			}
			holder(t0, "")
			acquire(a, "a", t0, true)
			acquire(b, "b", t0, false)
			acquire(a, "a", t0.Add(5*time.Second), true) // renewed to t0+15s
			acquire(b, "b", t0.Add(12*time.Second), false)
			holder(t0.Add(12*time.Second), "a")
			// a stops renewing: at its expiry b takes over, and a has lost it.
			acquire(b, "b", t0.Add(15*time.Second), true)
			acquire(a, "a", t0.Add(16*time.Second), false)
			holder(t0.Add(16*time.Second), "b")
			if _, _, err := b.AcquireLease(ctx, "other", "b", t0, 0); err == nil {
				t.Fatal("a zero ttl was accepted")
			}
			// A release by a non-holder does nothing; by the holder frees it.
			if err := a.ReleaseLease(ctx, "leader", "a"); err != nil {
				t.Fatal(err)
			}
			holder(t0.Add(16*time.Second), "b")
			if err := b.ReleaseLease(ctx, "leader", "b"); err != nil {
				t.Fatal(err)
			}
			holder(t0.Add(16*time.Second), "")
			acquire(a, "a", t0.Add(16*time.Second), true)

			// Pokes by any replica reach the holder with its next renewal.
			for range 2 {
				if err := b.PokeLease(ctx, "leader"); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.PokeLease(ctx, "no-such-lease"); err != nil {
				t.Fatal(err)
			}
			held, requests, err := a.AcquireLease(ctx, "leader", "a", t0.Add(17*time.Second), ttl)
			if err != nil || !held || requests != 2 {
				t.Fatalf("renewal after two pokes: held %v requests %d err %v, want held, 2", held, requests, err)
			}
		})
	}
}
