package store_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/internal/templates"
)

// backends returns a constructor per available database. Postgres needs
// $WARREN_TEST_POSTGRES_DSN (skip locally, fail under CI=true).
func backends(t *testing.T) map[string]func(t *testing.T) *store.SQL {
	t.Helper()
	return map[string]func(t *testing.T) *store.SQL{
		"sqlite": func(t *testing.T) *store.SQL {
			return storetest.SQLite(t)
		},
		"postgres": func(t *testing.T) *store.SQL {
			return storetest.Postgres(t)
		},
	}
}

func TestStore(t *testing.T) {
	t.Parallel()
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("teams and keys", func(t *testing.T) { testTeamsAndKeys(t, open(t)) })
			t.Run("team update and delete", func(t *testing.T) { testTeamUpdateDelete(t, open(t)) })
			t.Run("team delete leaves nothing", func(t *testing.T) { testTeamDeleteLeavesNothing(t, open(t)) })
			t.Run("fair deliveries and webhook limit", func(t *testing.T) { testFairDeliveries(t, open(t)) })
			t.Run("sandboxes", func(t *testing.T) { testSandboxes(t, open(t)) })
			t.Run("update is atomic", func(t *testing.T) { testUpdateAtomic(t, open(t)) })
			t.Run("events", func(t *testing.T) { testEvents(t, open(t)) })
			t.Run("event queries and retention", func(t *testing.T) { testEventQueries(t, open(t)) })
			t.Run("transition writes event and outbox atomically", func(t *testing.T) { testTransition(t, open(t)) })
			t.Run("webhooks and deliveries", func(t *testing.T) { testWebhooks(t, open(t)) })
		})
	}
}

func testTeamsAndKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	team := &store.Team{ID: "team-a", Name: "A", Limits: store.Limits{MaxConcurrent: 3, MaxTimeout: time.Hour, MaxVCPUs: 4, MaxMemoryMB: 2048}}
	if err := s.CreateTeam(ctx, team); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTeam(ctx, &store.Team{ID: "team-a", Name: "again"}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("duplicate team: got %v, want already exists", err)
	}
	got, err := s.GetTeam(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "A" || got.Limits != team.Limits {
		t.Fatalf("team = %+v, want %+v", got, team)
	}
	if _, err := s.GetTeam(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Fatalf("missing team: got %v", err)
	}
	k := &store.APIKey{ID: "k1", TeamID: "team-a", Name: "default", Hash: "abc", Mask: "e2b_…"}
	if err := s.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAPIKey(ctx, &store.APIKey{ID: "k2", TeamID: "team-a", Hash: "abc"}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("duplicate hash: got %v", err)
	}
	if err := s.CreateAPIKey(ctx, &store.APIKey{ID: "k3", TeamID: "no-team", Hash: "def"}); !errdefs.IsNotFound(err) {
		t.Fatalf("key of a missing team: got %v, want not found", err)
	}
	if err := s.CreateAPIKey(ctx, &store.APIKey{ID: "k1", TeamID: "team-a", Hash: "ghi"}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("duplicate id: got %v", err)
	}
	byHash, err := s.APIKeyByHash(ctx, "abc")
	if err != nil || byHash.ID != "k1" || byHash.TeamID != "team-a" {
		t.Fatalf("APIKeyByHash = %+v, %v", byHash, err)
	}
	keys, err := s.ListAPIKeys(ctx, "team-a")
	if err != nil || len(keys) != 1 {
		t.Fatalf("ListAPIKeys = %v, %v", keys, err)
	}
	if err := s.DeleteAPIKey(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAPIKey(ctx, "k1"); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.APIKeyByHash(ctx, "abc"); !errdefs.IsNotFound(err) {
		t.Fatalf("revoked key still found: %v", err)
	}
}

func newSandbox(id, team string, state sandbox.State, started time.Time) *store.Sandbox {
	return &store.Sandbox{
		ID: id, TeamID: team, TemplateID: "base", State: state, Epoch: 1,
		StartedAt: started, EndAt: started.Add(5 * time.Minute),
		Spec: store.Spec{Metadata: map[string]string{"k": id}, EnvdVersion: "0.6.13", Resources: sandbox.Resources{VCPUs: 2, MemoryMB: 512}},
	}
}

func testSandboxes(t *testing.T, s store.Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	for i, sb := range []*store.Sandbox{
		newSandbox("aaa", "t1", sandbox.StateRunning, t0.Add(2*time.Second)),
		newSandbox("bbb", "t1", sandbox.StatePaused, t0.Add(1*time.Second)),
		newSandbox("ccc", "t1", sandbox.StateKilled, t0),
		newSandbox("ddd", "t2", sandbox.StateRunning, t0),
	} {
		if err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if err := s.CreateSandbox(ctx, newSandbox("aaa", "t1", sandbox.StateRunning, t0)); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("duplicate sandbox: %v", err)
	}
	if err := s.CreateSandbox(ctx, newSandbox("BAD ID", "t1", sandbox.StateRunning, t0)); !errdefs.IsInvalid(err) {
		t.Fatalf("bad id: %v", err)
	}
	got, err := s.GetSandbox(ctx, "aaa")
	if err != nil {
		t.Fatal(err)
	}
	if !got.StartedAt.Equal(t0.Add(2*time.Second)) || got.Spec.Metadata["k"] != "aaa" || got.Spec.Resources.VCPUs != 2 {
		t.Fatalf("round trip: %+v", got)
	}
	tests := []struct {
		name string
		f    store.SandboxFilter
		want []string
	}{
		{"team live", store.SandboxFilter{TeamID: "t1"}, []string{"bbb", "aaa"}},
		{"running", store.SandboxFilter{TeamID: "t1", States: []sandbox.State{sandbox.StateRunning}}, []string{"aaa"}},
		{"killed", store.SandboxFilter{States: []sandbox.State{sandbox.StateKilled}}, []string{"ccc"}},
		{"all teams", store.SandboxFilter{}, []string{"ddd", "bbb", "aaa"}},
		{"started at or after", store.SandboxFilter{TeamID: "t1", StartedAfter: t0.Add(2 * time.Second)}, []string{"aaa"}},
		{"started after", store.SandboxFilter{TeamID: "t1", StartedAfter: t0.Add(2*time.Second + time.Nanosecond)}, nil},
		{"template", store.SandboxFilter{TemplateID: "other"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			list, err := s.ListSandboxes(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, sb := range list {
				ids = append(ids, sb.ID)
			}
			if len(ids) != len(tc.want) {
				t.Fatalf("ids = %v, want %v", ids, tc.want)
			}
			for i := range ids {
				if ids[i] != tc.want[i] {
					t.Fatalf("ids = %v, want %v", ids, tc.want)
				}
			}
		})
	}
	n, err := s.CountSandboxes(ctx, "t1", store.ActiveStates...)
	if err != nil || n != 1 {
		t.Fatalf("count active = %d, %v", n, err)
	}
	up, err := s.UpdateSandbox(ctx, "aaa", func(sb *store.Sandbox) error {
		sb.State, sb.Epoch, sb.KillReason = sandbox.StateKilled, 2, sandbox.KillTimeout
		sb.KilledAt = t0.Add(time.Hour)
		return nil
	})
	if err != nil || up.State != sandbox.StateKilled {
		t.Fatalf("update: %+v %v", up, err)
	}
	got, _ = s.GetSandbox(ctx, "aaa")
	if got.KillReason != sandbox.KillTimeout || got.Epoch != 2 || !got.KilledAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after update: %+v", got)
	}
	sentinel := errors.New("no")
	if _, err := s.UpdateSandbox(ctx, "bbb", func(sb *store.Sandbox) error { sb.Epoch = 99; return sentinel }); !errors.Is(err, sentinel) {
		t.Fatalf("fn error: %v", err)
	}
	if got, _ := s.GetSandbox(ctx, "bbb"); got.Epoch != 1 {
		t.Fatalf("failed update was written: epoch %d", got.Epoch)
	}
	if _, err := s.UpdateSandbox(ctx, "zzz", func(*store.Sandbox) error { return nil }); !errdefs.IsNotFound(err) {
		t.Fatalf("update missing: %v", err)
	}
	// Retention of killed sandboxes: aaa was killed at t0+1h; a cut
	// before that keeps it, one after removes it and nothing else.
	if n, err := s.PruneSandboxes(ctx, t0.Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("prune before the kill: %d, %v", n, err)
	}
	if n, err := s.PruneSandboxes(ctx, t0.Add(time.Hour+time.Second)); err != nil || n != 1 {
		t.Fatalf("prune after the kill: %d, %v; want 1", n, err)
	}
	if _, err := s.GetSandbox(ctx, "aaa"); !errdefs.IsNotFound(err) {
		t.Fatalf("pruned killed sandbox: %v", err)
	}
	if got, err := s.GetSandbox(ctx, "bbb"); err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("prune touched a paused sandbox: %+v %v", got, err)
	}
	if err := s.DeleteSandbox(ctx, "ccc"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSandbox(ctx, "ccc"); !errdefs.IsNotFound(err) {
		t.Fatalf("deleted sandbox: %v", err)
	}
}

// testUpdateAtomic increments a counter from many goroutines; a lost
// update shows as a smaller total.
func testUpdateAtomic(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateSandbox(ctx, newSandbox("ctr", "t1", sandbox.StateRunning, time.Now())); err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				_, err := s.UpdateSandbox(ctx, "ctr", func(sb *store.Sandbox) error { sb.Epoch++; return nil })
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, _ := s.GetSandbox(ctx, "ctr")
	if got.Epoch != 1+workers*each {
		t.Fatalf("epoch = %d, want %d", got.Epoch, 1+workers*each)
	}
}

func testEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i, typ := range []string{store.EventCreated, store.EventKilled} {
		e := &store.Event{SandboxID: "s1", TeamID: "t1", Type: typ, Epoch: int64(i + 1)}
		if typ == store.EventKilled {
			e.Reason = sandbox.KillTimeout
		}
		if err := s.AppendEvent(ctx, e); err != nil || e.ID == 0 {
			t.Fatalf("append: id %d, %v", e.ID, err)
		}
	}
	evs, err := s.ListEvents(ctx, "s1")
	if err != nil || len(evs) != 2 {
		t.Fatalf("events = %v, %v", evs, err)
	}
	if evs[1].Type != store.EventKilled || evs[1].Reason != sandbox.KillTimeout || evs[0].ID >= evs[1].ID {
		t.Fatalf("events = %+v %+v", evs[0], evs[1])
	}
}

// TestSQLiteReopen checks that migrations are idempotent and data survives
// a reopen (what a restart of warren serve does).
func TestSQLiteReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "w.db")
	s, err := store.OpenSQLite(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, newSandbox("keep", "t", sandbox.StateRunning, time.Now())); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = store.OpenSQLite(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetSandbox(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil || v != store.SchemaVersion() {
		t.Fatalf("schema version = %d, %v", v, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

func testTeamUpdateDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.CreateTeam(ctx, &store.Team{ID: "tapi-a", Name: "A"}); err != nil {
		t.Fatal(err)
	}
	want := store.Limits{MaxConcurrent: 2, MaxTimeout: time.Minute, MaxVCPUs: 1, MaxMemoryMB: 256, MaxDiskMB: 1024, MaxPaused: 3, MaxSnapshots: 4,
		MaxBuilds: 5, MaxWebhooks: 6, MaxTemplateStorageMB: 7000}
	got, err := s.UpdateTeam(ctx, "tapi-a", func(tm *store.Team) error { tm.Limits = want; tm.ID = "other"; return nil })
	if err != nil || got.ID != "tapi-a" || got.Limits != want {
		t.Fatalf("UpdateTeam = %+v, %v", got, err)
	}
	if back, err := s.GetTeam(ctx, "tapi-a"); err != nil || back.Limits != want {
		t.Fatalf("limits after update = %+v, %v; want %+v", back, err, want)
	}
	if _, err := s.UpdateTeam(ctx, "missing", func(*store.Team) error { return nil }); !errdefs.IsNotFound(err) {
		t.Fatalf("update of a missing team: %v", err)
	}
	if err := s.CreateAPIKey(ctx, &store.APIKey{ID: "ka", TeamID: "tapi-a", Hash: "h-a", Mask: "m"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWebhook(ctx, &store.Webhook{ID: "wa", TeamID: "tapi-a", URL: "https://example.invalid/", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	sb := &store.Sandbox{ID: "sb-a", TeamID: "tapi-a", TemplateID: "base", State: sandbox.StateRunning, StartedAt: time.Now(), EndAt: time.Now().Add(time.Hour)}
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTeam(ctx, "tapi-a"); !errdefs.IsConflict(err) {
		t.Fatalf("delete of a team with a running sandbox: %v, want conflict", err)
	}
	if _, err := s.UpdateSandbox(ctx, "sb-a", func(sb *store.Sandbox) error { sb.State = sandbox.StateKilled; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTeam(ctx, "tapi-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTeam(ctx, "tapi-a"); !errdefs.IsNotFound(err) {
		t.Fatalf("team after delete: %v", err)
	}
	if _, err := s.APIKeyByHash(ctx, "h-a"); !errdefs.IsNotFound(err) {
		t.Fatalf("key of a deleted team still authenticates: %v", err)
	}
	if _, err := s.GetWebhook(ctx, "tapi-a", "wa"); !errdefs.IsNotFound(err) {
		t.Fatalf("webhook of a deleted team: %v", err)
	}
	if err := s.DeleteTeam(ctx, "tapi-a"); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
}

// testTeamDeleteLeavesNothing: deleting a team removes every row of it,
// and its ID is never given to a new team, which therefore cannot inherit
// the old team's sandboxes, events, webhooks or templates.
func testTeamDeleteLeavesNothing(t *testing.T, s *store.SQL) {
	ctx := context.Background()
	const id = "tapi-gone"
	if err := s.CreateTeam(ctx, &store.Team{ID: id, Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWebhook(ctx, &store.Webhook{ID: "wh-gone", TeamID: id, URL: "https://example.invalid/", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sb := &store.Sandbox{ID: "sb-gone", TeamID: id, TemplateID: "base", State: sandbox.StateRunning, StartedAt: now, EndAt: now.Add(time.Hour)}
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TransitionSandbox(ctx, sb.ID, func(sb *store.Sandbox) (*store.Event, error) {
		sb.State = sandbox.StateKilled
		return &store.Event{SandboxID: sb.ID, TeamID: id, Type: store.EventKilled, At: now}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvent(ctx, &store.Event{SandboxID: sb.ID, TeamID: id, Type: store.EventUpdated, At: now}); err != nil {
		t.Fatal(err)
	}
	tpl := &templates.Template{ID: "tplgone0000000000001", TeamID: id, Aliases: []string{"app"}, Tags: map[string]templates.Tag{}, CreatedAt: now}
	if err := s.Templates().CreateTemplate(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	b := &templates.Build{ID: "00000000-0000-4000-8000-00000000g0ne", TemplateID: tpl.ID, Status: templates.BuildReady, CreatedAt: now}
	if err := s.Templates().CreateBuild(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Templates().AppendLogs(ctx, b.ID, templates.LogEntry{Timestamp: now, Level: templates.LogInfo, Message: "secret of gone"}); err != nil {
		t.Fatal(err)
	}
	// Before: the rows are there (the checks below would prove nothing
	// otherwise).
	if evs, err := s.QueryEvents(ctx, store.EventFilter{TeamID: id}); err != nil || len(evs) != 2 {
		t.Fatalf("events before the delete: %d, %v", len(evs), err)
	}
	if err := s.DeleteTeam(ctx, id); err != nil {
		t.Fatal(err)
	}

	// Every row of it is gone...
	if sbs, err := s.ListSandboxes(ctx, store.SandboxFilter{TeamID: id}); err != nil || len(sbs) != 0 {
		t.Fatalf("sandboxes of the deleted team: %d, %v", len(sbs), err)
	}
	if _, err := s.GetSandbox(ctx, sb.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("sandbox row of the deleted team: %v", err)
	}
	if evs, err := s.QueryEvents(ctx, store.EventFilter{TeamID: id}); err != nil || len(evs) != 0 {
		t.Fatalf("events of the deleted team: %d, %v", len(evs), err)
	}
	if evs, err := s.ListEvents(ctx, sb.ID); err != nil || len(evs) != 0 {
		t.Fatalf("events of the deleted team's sandbox: %d, %v", len(evs), err)
	}
	if ws, err := s.ListWebhooks(ctx, id); err != nil || len(ws) != 0 {
		t.Fatalf("webhooks of the deleted team: %d, %v", len(ws), err)
	}
	if ds, err := s.ClaimDeliveries(ctx, now.Add(time.Hour), time.Minute, 100); err != nil || len(ds) != 0 {
		t.Fatalf("deliveries of the deleted team: %d, %v", len(ds), err)
	}
	if _, err := s.Templates().GetTemplate(ctx, tpl.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("template of the deleted team: %v", err)
	}
	if _, err := s.Templates().TemplateByAlias(ctx, id, "app"); !errdefs.IsNotFound(err) {
		t.Fatalf("alias of the deleted team: %v", err)
	}
	if _, err := s.Templates().GetBuild(ctx, b.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("build of the deleted team: %v", err)
	}
	if logs, err := s.Templates().Logs(ctx, b.ID, 0); err != nil || len(logs) != 0 {
		t.Fatalf("build log of the deleted team: %v, %v", logs, err)
	}
	// ... and a new team with the same ID is refused.
	err := s.CreateTeam(ctx, &store.Team{ID: id, Name: "new"})
	if msg, _ := errdefs.Message(err); !errdefs.IsAlreadyExists(err) || !strings.Contains(msg, "not reused") {
		t.Fatalf("create of a deleted team's ID: %v, want already exists (IDs are not reused)", err)
	}
	if _, err := s.GetTeam(ctx, id); !errdefs.IsNotFound(err) {
		t.Fatalf("team after a refused re-create: %v", err)
	}
	// Other IDs still work, and an existing team's ID is a plain duplicate.
	if err := s.CreateTeam(ctx, &store.Team{ID: "tapi-new", Name: "new"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTeam(ctx, &store.Team{ID: "tapi-new"}); !errdefs.IsAlreadyExists(err) || strings.Contains(err.Error(), "not reused") {
		t.Fatalf("duplicate of a live team: %v", err)
	}
}

// testFairDeliveries: claims go in turn between teams and within each
// team's room; a team's webhooks are bounded at creation.
func testFairDeliveries(t *testing.T, s *store.SQL) {
	ctx := context.Background()
	for _, team := range []string{"tapi-fa", "tapi-fb"} {
		if err := s.CreateWebhookWithin(ctx, &store.Webhook{ID: "wh-" + team, TeamID: team, URL: "https://example.invalid/", Enabled: true}, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateWebhookWithin(ctx, &store.Webhook{ID: "wh2-" + team, TeamID: team, URL: "https://example.invalid/", Enabled: true}, 1); !errdefs.IsExhausted(err) {
			t.Fatalf("a second webhook under a limit of 1: %v, want exhausted", err)
		}
	}
	now := time.Now()
	for i := range 5 {
		if err := s.AppendEvent(ctx, &store.Event{SandboxID: "sb", TeamID: "tapi-fa", Type: store.EventUpdated, At: now.Add(time.Duration(i) * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendEvent(ctx, &store.Event{SandboxID: "sb", TeamID: "tapi-fb", Type: store.EventUpdated, At: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	teams := func(ds []*store.Delivery) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.TeamID)
		}
		return out
	}
	at := now.Add(time.Hour)
	got, err := s.ClaimFairDeliveries(ctx, at, time.Minute, store.DeliveryClaim{Limit: 2, PerTeam: 2, Room: map[string]int{"tapi-fa": 1}})
	if err != nil || len(got) != 2 || got[0].TeamID == got[1].TeamID {
		t.Fatalf("claim of 2 with team A's room 1: %v, %v; want one of each team", teams(got), err)
	}
	got, err = s.ClaimFairDeliveries(ctx, at, time.Minute, store.DeliveryClaim{Limit: 10, PerTeam: 3, Room: map[string]int{"tapi-fb": 0}})
	if err != nil || len(got) != 3 || slices.Contains(teams(got), "tapi-fb") {
		t.Fatalf("claim of team A's next 3: %v, %v", teams(got), err)
	}
}
