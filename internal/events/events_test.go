package events_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/events"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

func TestPayloadShape(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	e := &store.Event{UID: "u1", SandboxID: "s", TeamID: "t", TemplateID: "tpl", BuildID: "b", ExecutionID: "x",
		Type: store.EventKilled, Reason: sandbox.KillOOM, At: at,
		Data: store.EventData{KillReason: "oom", Metadata: map[string]string{"k": "v"},
			Execution: &store.Execution{StartedAt: at.Add(-time.Minute), VCPUCount: 1, MemoryMB: 256, ExecutionTime: 60000}}}
	b, err := json.Marshal(events.PayloadOf(e))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":"v2","id":"u1","type":"sandbox.lifecycle.killed","eventData":{"kill_reason":"oom","sandbox_metadata":{"k":"v"},"execution":{"started_at":"2026-05-06T07:07:09Z","vcpu_count":1,"memory_mb":256,"execution_time":60000}},"sandboxBuildId":"b","sandboxExecutionId":"x","sandboxId":"s","sandboxTeamId":"t","sandboxTemplateId":"tpl","timestamp":"2026-05-06T07:08:09Z"}`
	if string(b) != want {
		t.Fatalf("payload\n got %s\nwant %s", b, want)
	}
	if p := events.PayloadOf(&store.Event{Type: store.EventTimeoutSet}); p.Type != "sandbox.lifecycle.updated" {
		t.Fatalf("old timeout_set maps to %q", p.Type)
	}
}

func TestParseTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      []string
		want    []string
		invalid bool
	}{
		{nil, nil, false},
		{[]string{"killed"}, []string{"killed"}, false},
		{[]string{"sandbox.lifecycle.paused,resumed", "paused"}, []string{"paused", "resumed"}, false},
		{[]string{"exploded"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.in, "|"), func(t *testing.T) {
			got, err := events.ParseTypes(tc.in)
			if tc.invalid != errdefs.IsInvalid(err) || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseTypes(%q) = %q, %v", tc.in, got, err)
			}
		})
	}
}

func TestPruner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	for _, age := range []time.Duration{48 * time.Hour, 25 * time.Hour, time.Hour} {
		if err := st.AppendEvent(ctx, &store.Event{SandboxID: "s", TeamID: "t", Type: store.EventCreated, At: time.Now().Add(-age)}); err != nil {
			t.Fatal(err)
		}
	}
	// Killed two days ago, killed an hour ago, running.
	for _, sb := range []struct {
		id       string
		state    sandbox.State
		killedAt time.Time
	}{{"old", sandbox.StateKilled, time.Now().Add(-48 * time.Hour)}, {"recent", sandbox.StateKilled, time.Now().Add(-time.Hour)}, {"live", sandbox.StateRunning, time.Time{}}} {
		row := &store.Sandbox{ID: sb.id, TeamID: "t", TemplateID: "base", State: sb.state, Epoch: 1, StartedAt: time.Now().Add(-72 * time.Hour),
			EndAt: time.Now().Add(time.Hour), KilledAt: sb.killedAt}
		if sb.state == sandbox.StateKilled {
			row.KillReason = sandbox.KillTimeout
		}
		if err := st.CreateSandbox(ctx, row); err != nil {
			t.Fatal(err)
		}
	}
	p := events.NewPruner(events.PrunerConfig{Store: st, Retention: 24 * time.Hour})
	if n, err := p.PruneOnce(ctx); err != nil || n != 2 {
		t.Fatalf("pruned %d, %v; want 2", n, err)
	}
	if evs, _ := st.ListEvents(ctx, "s"); len(evs) != 1 {
		t.Fatalf("%d events left, want 1", len(evs))
	}
	for id, want := range map[string]bool{"old": false, "recent": true, "live": true} {
		if _, err := st.GetSandbox(ctx, id); (err == nil) != want {
			t.Errorf("sandbox %s after prune: %v, want kept=%v", id, err, want)
		}
	}
}
