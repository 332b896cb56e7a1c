package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// TestRecordSandbox: a sandbox and its first event are stored in one
// transaction, within the team's limit; over it, or when the row cannot
// be inserted, neither is.
func TestRecordSandbox(t *testing.T) {
	t.Parallel()
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, ctx := open(t), context.Background()
			ev := func(id string) *store.Event {
				return &store.Event{SandboxID: id, TeamID: "t1", TemplateID: "base", Type: store.EventCreated, Epoch: 1, At: time.Now()}
			}
			if err := s.RecordSandbox(ctx, newSandbox("a", "t1", sandbox.StateRunning, time.Now()), ev("a"), 1, store.ActiveStates...); err != nil {
				t.Fatal(err)
			}
			if evs, err := s.ListEvents(ctx, "a"); err != nil || len(evs) != 1 || evs[0].Type != store.EventCreated {
				t.Fatalf("events of a: %+v, %v; want one created", evs, err)
			}
			err := s.RecordSandbox(ctx, newSandbox("b", "t1", sandbox.StateRunning, time.Now()), ev("b"), 1, store.ActiveStates...)
			if !errdefs.IsExhausted(err) {
				t.Fatalf("record over the limit: %v, want exhausted", err)
			}
			if _, err := s.GetSandbox(ctx, "b"); !errdefs.IsNotFound(err) {
				t.Fatalf("sandbox over the limit stored: %v", err)
			}
			// No limit (0): a second row of a cannot be inserted, and its
			// event is not stored either.
			if err := s.RecordSandbox(ctx, newSandbox("a", "t1", sandbox.StateRunning, time.Now()), ev("a"), 0); !errdefs.IsAlreadyExists(err) {
				t.Fatalf("record of an existing sandbox: %v, want already exists", err)
			}
			if evs, err := s.ListEvents(ctx, "a"); err != nil || len(evs) != 1 {
				t.Fatalf("events of a after a failed record: %d, %v; want 1", len(evs), err)
			}
			if err := s.RecordSandbox(ctx, newSandbox("c", "t1", sandbox.StateRunning, time.Now()), ev("c"), 0); err != nil {
				t.Fatalf("record without a limit: %v", err)
			}
		})
	}
}
