package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

// TestWatchSandboxes: a watcher of b hears every update, delete and
// RecordSandbox of a sandbox row made through a, another process on the
// same database on Postgres (LISTEN/NOTIFY); a change made through the
// watched store itself is heard before the call that made it returns.
func TestWatchSandboxes(t *testing.T) {
	t.Parallel()
	for name, open := range storetest.Processes() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a, b := open(t)
			ctx, cancel := context.WithCancel(context.Background())
			heard := make(chan string, 64)
			done := make(chan error, 1)
			go func() { done <- b.WatchSandboxes(ctx, func(id string) { heard <- id }) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("WatchSandboxes: %v", err)
				}
			}()
			// await waits for id; other IDs ("" for a reconnect, other
			// tests' schemas on the same database) may come between.
			await := func(what, id string) {
				t.Helper()
				deadline := time.After(30 * time.Second)
				for {
					select {
					case got := <-heard:
						if got == id {
							return
						}
					case <-deadline:
						t.Fatalf("%s: no change of %q heard", what, id)
					}
				}
			}
			await("watching", "")
			id := "sbw-" + sandbox.RandomToken(4)
			sb := newSandbox(id, "team-w", sandbox.StateRunning, time.Now())
			if err := a.CreateSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
			if _, err := a.UpdateSandbox(ctx, id, func(s *store.Sandbox) error { s.State = sandbox.StatePaused; return nil }); err != nil {
				t.Fatal(err)
			}
			await("update", id)
			if err := a.DeleteSandbox(ctx, id); err != nil {
				t.Fatal(err)
			}
			await("delete", id)
			// A row stored with its first event (a create of one write)
			// is a change as well.
			rid := id + "r"
			ev := &store.Event{SandboxID: rid, TeamID: "team-w", TemplateID: "base", Type: store.EventCreated, Epoch: 1, At: time.Now()}
			if err := a.RecordSandbox(ctx, newSandbox(rid, "team-w", sandbox.StateRunning, time.Now()), ev, 0); err != nil {
				t.Fatal(err)
			}
			await("record", rid)
			if name == "sqlite" {
				// Synchronous: heard before UpdateSandbox returned.
				id2 := id + "x"
				if err := b.CreateSandbox(ctx, newSandbox(id2, "team-w", sandbox.StateRunning, time.Now())); err != nil {
					t.Fatal(err)
				}
				if _, err := b.UpdateSandbox(ctx, id2, func(s *store.Sandbox) error { return nil }); err != nil {
					t.Fatal(err)
				}
				select {
				case got := <-heard:
					if got != id2 {
						t.Fatalf("heard %q, want %q", got, id2)
					}
				default:
					t.Fatal("the change was not heard before UpdateSandbox returned")
				}
			}
		})
	}
}
