package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

func testEventQueries(t *testing.T, s store.Store) {
	ctx := context.Background()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	types := []string{store.EventCreated, store.EventPaused, store.EventResumed, store.EventUpdated, store.EventKilled}
	for i, typ := range types {
		for _, sbx := range []string{"a", "b"} {
			e := &store.Event{SandboxID: sbx, TeamID: "t1", TemplateID: "base", BuildID: "b1", ExecutionID: "x" + sbx,
				Type: typ, At: base.Add(time.Duration(i) * time.Minute),
				Data: store.EventData{Metadata: map[string]string{"k": "v"}}}
			if typ == store.EventKilled {
				e.Reason = sandbox.KillTimeout
				e.Data.Execution = &store.Execution{StartedAt: base, VCPUCount: 2, MemoryMB: 512, ExecutionTime: 240000}
			}
			if err := s.AppendEvent(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.AppendEvent(ctx, &store.Event{SandboxID: "c", TeamID: "t2", Type: store.EventCreated, At: base}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.QueryEvents(ctx, store.EventFilter{}); !errdefs.IsInvalid(err) {
		t.Fatalf("query without team or sandbox: %v", err)
	}
	tests := []struct {
		name string
		f    store.EventFilter
		want int
	}{
		{"team", store.EventFilter{TeamID: "t1"}, 10},
		{"other team", store.EventFilter{TeamID: "t2"}, 1},
		{"sandbox", store.EventFilter{SandboxID: "a"}, 5},
		{"team and sandbox of another team", store.EventFilter{TeamID: "t2", SandboxID: "a"}, 0},
		{"types", store.EventFilter{TeamID: "t1", Types: []string{store.EventKilled, store.EventPaused}}, 4},
		{"since", store.EventFilter{TeamID: "t1", Since: base.Add(3 * time.Minute)}, 4},
		{"until", store.EventFilter{TeamID: "t1", Until: base.Add(time.Minute)}, 2},
		{"limit", store.EventFilter{TeamID: "t1", Limit: 3}, 3},
		{"offset", store.EventFilter{TeamID: "t1", Offset: 8}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.QueryEvents(ctx, tc.f)
			if err != nil || len(got) != tc.want {
				t.Fatalf("%+v: %d events, %v; want %d", tc.f, len(got), err, tc.want)
			}
		})
	}
	// Paging: ascending by AfterID, descending by BeforeID, no overlap.
	var seen []int64
	f := store.EventFilter{TeamID: "t1", Limit: 4}
	for {
		page, err := s.QueryEvents(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			seen = append(seen, e.ID)
		}
		f.AfterID = page[len(page)-1].ID
	}
	if len(seen) != 10 || !slices.IsSorted(seen) {
		t.Fatalf("paged ids %v", seen)
	}
	desc, _ := s.QueryEvents(ctx, store.EventFilter{TeamID: "t1", Desc: true, BeforeID: seen[5], Limit: 2})
	if len(desc) != 2 || desc[0].ID != seen[4] || desc[1].ID != seen[3] {
		t.Fatalf("descending page %v", desc)
	}
	killed, _ := s.QueryEvents(ctx, store.EventFilter{SandboxID: "a", Types: []string{store.EventKilled}})
	k := killed[0]
	if k.Reason != sandbox.KillTimeout || k.Data.KillReason != "timeout" || k.Data.Execution == nil || k.Data.Execution.MemoryMB != 512 ||
		k.TemplateID != "base" || k.BuildID != "b1" || k.ExecutionID != "xa" || k.Data.Metadata["k"] != "v" || len(k.UID) != 36 {
		t.Fatalf("killed event round trip: %+v data %+v", k, k.Data)
	}
	if got, err := s.GetEvent(ctx, k.ID); err != nil || got.UID != k.UID {
		t.Fatalf("get event: %+v %v", got, err)
	}
	// Retention: events before the cut go, later ones stay.
	n, err := s.PruneEvents(ctx, base.Add(2*time.Minute))
	if err != nil || n != 5 {
		t.Fatalf("pruned %d, %v; want 5", n, err)
	}
	left, _ := s.QueryEvents(ctx, store.EventFilter{TeamID: "t1"})
	if len(left) != 6 || left[0].At.Before(base.Add(2*time.Minute)) {
		t.Fatalf("after prune: %d events, first at %v", len(left), left[0].At)
	}
}

func testTransition(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateSandbox(ctx, newSandbox("tr", "t1", sandbox.StateRunning, time.Now())); err != nil {
		t.Fatal(err)
	}
	hook := &store.Webhook{ID: "w1", TeamID: "t1", Name: "n", URL: "http://127.0.0.1:1/", Secret: "s", Enabled: true, Events: []string{store.EventKilled}}
	if err := s.CreateWebhook(ctx, hook); err != nil {
		t.Fatal(err)
	}
	// A failing fn writes neither the state nor the event nor the outbox.
	boom := errors.New("boom")
	if _, err := s.TransitionSandbox(ctx, "tr", func(sb *store.Sandbox) (*store.Event, error) {
		sb.State = sandbox.StateKilled
		return &store.Event{SandboxID: sb.ID, TeamID: sb.TeamID, Type: store.EventKilled}, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("transition error: %v", err)
	}
	if evs, _ := s.ListEvents(ctx, "tr"); len(evs) != 0 {
		t.Fatalf("events after a failed transition: %d", len(evs))
	}
	sb, err := s.TransitionSandbox(ctx, "tr", func(sb *store.Sandbox) (*store.Event, error) {
		sb.State, sb.KillReason = sandbox.StateKilled, sandbox.KillRequest
		return &store.Event{SandboxID: sb.ID, TeamID: sb.TeamID, Type: store.EventKilled, Reason: sb.KillReason}, nil
	})
	if err != nil || sb.State != sandbox.StateKilled {
		t.Fatalf("transition: %+v %v", sb, err)
	}
	evs, _ := s.ListEvents(ctx, "tr")
	if len(evs) != 1 || evs[0].Type != store.EventKilled || evs[0].Reason != sandbox.KillRequest {
		t.Fatalf("events after transition: %+v", evs)
	}
	ds, _ := s.ListDeliveries(ctx, "t1", "w1", 0)
	if len(ds) != 1 || ds[0].EventID != evs[0].ID || ds[0].State != store.DeliveryPending {
		t.Fatalf("outbox after transition: %+v", ds)
	}
}

func testWebhooks(t *testing.T, s store.Store) {
	ctx := context.Background()
	w := &store.Webhook{ID: "w1", TeamID: "t1", Name: "all", URL: "http://127.0.0.1:9/hook", Secret: "sec", Enabled: true}
	if err := s.CreateWebhook(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWebhook(ctx, &store.Webhook{ID: "w1", TeamID: "t1"}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("duplicate webhook: %v", err)
	}
	only := &store.Webhook{ID: "w2", TeamID: "t1", Name: "kills", URL: "http://127.0.0.1:9/k", Secret: "s2", Enabled: true, Events: []string{store.EventKilled}}
	off := &store.Webhook{ID: "w3", TeamID: "t1", Name: "off", URL: "http://127.0.0.1:9/o", Secret: "s3", Enabled: false}
	other := &store.Webhook{ID: "w4", TeamID: "t2", Name: "other", URL: "http://127.0.0.1:9/x", Secret: "s4", Enabled: true}
	for _, h := range []*store.Webhook{only, off, other} {
		if err := s.CreateWebhook(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.GetWebhook(ctx, "t2", "w1"); !errdefs.IsNotFound(err) {
		t.Fatalf("other team's webhook: %v", err)
	}
	if hs, _ := s.ListWebhooks(ctx, "t1"); len(hs) != 3 {
		t.Fatalf("list: %d", len(hs))
	}
	for _, typ := range []string{store.EventCreated, store.EventKilled} {
		if err := s.AppendEvent(ctx, &store.Event{SandboxID: "s", TeamID: "t1", Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	if ds, _ := s.ListDeliveries(ctx, "t1", "w1", 0); len(ds) != 2 {
		t.Fatalf("w1 (all types) deliveries %d, want 2", len(ds))
	}
	if ds, _ := s.ListDeliveries(ctx, "t1", "w2", 0); len(ds) != 1 {
		t.Fatalf("w2 (killed only) deliveries %d, want 1", len(ds))
	}
	if ds, _ := s.ListDeliveries(ctx, "t1", "w3", 0); len(ds) != 0 {
		t.Fatalf("disabled webhook got %d deliveries", len(ds))
	}
	if ds, _ := s.ListDeliveries(ctx, "t2", "w4", 0); len(ds) != 0 {
		t.Fatalf("other team's webhook got %d deliveries", len(ds))
	}
	now := time.Now()
	next, err := s.NextDeliveryAt(ctx)
	if err != nil || next.IsZero() || next.After(now) {
		t.Fatalf("next delivery at %v, %v", next, err)
	}
	claimed, err := s.ClaimDeliveries(ctx, now, time.Minute, 10)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d, %v", len(claimed), err)
	}
	if again, _ := s.ClaimDeliveries(ctx, now, time.Minute, 10); len(again) != 0 {
		t.Fatalf("claimed twice: %d", len(again))
	}
	// A lease that runs out makes the delivery due again (crashed dispatcher).
	if late, _ := s.ClaimDeliveries(ctx, now.Add(2*time.Minute), time.Minute, 10); len(late) != 3 {
		t.Fatalf("after the lease: %d", len(late))
	}
	d := claimed[0]
	d.State, d.Attempts, d.LastStatus, d.DeliveredAt = store.DeliveryDelivered, 1, 200, time.Now()
	if err := s.RecordAttempt(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redeliver(ctx, "t2", d.WebhookID, d.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("redeliver of another team's delivery: %v", err)
	}
	rd, err := s.Redeliver(ctx, "t1", d.WebhookID, d.ID)
	if err != nil || rd.State != store.DeliveryPending || rd.Attempts != 1 {
		t.Fatalf("redeliver: %+v %v", rd, err)
	}
	w.URL, w.Enabled, w.Events = "http://127.0.0.1:9/new", false, []string{store.EventPaused}
	if err := s.UpdateWebhook(ctx, w); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetWebhook(ctx, "t1", "w1"); got.URL != w.URL || got.Enabled || !slices.Equal(got.Events, w.Events) {
		t.Fatalf("updated webhook %+v", got)
	}
	if err := s.DeleteWebhook(ctx, "t2", "w1"); !errdefs.IsNotFound(err) {
		t.Fatalf("delete by another team: %v", err)
	}
	if err := s.DeleteWebhook(ctx, "t1", "w1"); err != nil {
		t.Fatal(err)
	}
	if ds, _ := s.ListDeliveries(ctx, "t1", "w1", 0); len(ds) != 0 {
		t.Fatalf("deliveries of a deleted webhook: %d", len(ds))
	}
}
