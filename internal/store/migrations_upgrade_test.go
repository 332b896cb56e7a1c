package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/secrets"
)

// TestUpgradeFromVersion1 opens a database left at schema version 1 with
// an event in it: migration 2 applies and the old event reads back with
// empty new fields.
func TestUpgradeFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`,
		migrations[0].sqlite,
		`INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1)`,
		`INSERT INTO teams (id, name, created_at) VALUES ('t', 't', 1)`,
		`INSERT INTO events (sandbox_id, team_id, type, reason, epoch, at, message) VALUES ('old', 't', 'killed', 'timeout', 2, 1000, '')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	db.Close()
	s, err := OpenSQLite(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := s.QueryEvents(ctx, EventFilter{TeamID: "t"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("events after upgrade: %v, %v", evs, err)
	}
	if e := evs[0]; e.Reason != "timeout" || e.Epoch != 2 || e.ExecutionID != "" || e.Data.Execution != nil {
		t.Fatalf("old event after upgrade: %+v", e)
	}
	var v int
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil || v != SchemaVersion() {
		t.Fatalf("version %d, %v", v, err)
	}
}

// TestUpgradeFromVersion3 opens a database left at schema version 3 with a
// sandbox whose node was only in its spec: migration 4 copies it to the
// node_id column, so the sandbox counts on its node.
func TestUpgradeFromVersion3(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v3.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`}
	for _, m := range migrations[:3] {
		qs = append(qs, m.sqlite)
	}
	qs = append(qs, `INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1), (2, 1), (3, 1)`,
		`INSERT INTO teams (id, name, created_at) VALUES ('t', 't', 1)`,
		`INSERT INTO sandboxes (id, team_id, template_id, state, epoch, started_at, end_at, created_at, updated_at, spec)
		 VALUES ('old', 't', 'base', 'running', 1, 1, 2, 1, 1, '{"nodeId":"local","resources":{}}')`)
	for _, q := range qs {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	db.Close()
	s, err := OpenSQLite(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	counts, err := s.CountSandboxesByNode(ctx)
	if err != nil || counts["local"] != 1 {
		t.Fatalf("sandboxes by node after upgrade: %v, %v", counts, err)
	}
}

// TestUpgradeFromVersion6 opens a database left at schema version 6 with
// the rows a team deleted before version 7 left (a killed sandbox, its
// event, a webhook, a template) beside a live team's: migration 7 removes
// the deleted team's rows, keeps the live team's, and refuses the deleted
// team's ID to a new team.
func TestUpgradeFromVersion6(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v6.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`}
	for _, m := range migrations[:6] {
		qs = append(qs, m.sqlite)
	}
	qs = append(qs, `INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)`,
		`INSERT INTO teams (id, name, created_at) VALUES ('live', 'live', 1)`)
	for _, team := range []string{"live", "gone"} {
		qs = append(qs,
			`INSERT INTO sandboxes (id, team_id, template_id, state, epoch, started_at, end_at, created_at, updated_at, spec)
			 VALUES ('sb-`+team+`', '`+team+`', 'base', 'killed', 1, 1, 2, 1, 1, '{"resources":{}}')`,
			`INSERT INTO events (sandbox_id, team_id, type, reason, epoch, at, message) VALUES ('sb-`+team+`', '`+team+`', 'killed', 'request', 1, 1000, '')`,
			`INSERT INTO webhooks (id, team_id, name, url, events, secret, enabled, created_at, updated_at) VALUES ('wh-`+team+`', '`+team+`', '', 'https://example.invalid/', '[]', '', 1, 1, 1)`,
			`INSERT INTO templates (id, team_id, created_at, doc) VALUES ('tpl-`+team+`', '`+team+`', 1, '{"id":"tpl-`+team+`","teamId":"`+team+`","aliases":["app"]}')`,
			`INSERT INTO template_aliases (team_id, alias, template_id) VALUES ('`+team+`', 'app', 'tpl-`+team+`')`)
	}
	qs = append(qs, `INSERT INTO templates (id, team_id, created_at, doc) VALUES ('base', '', 1, '{"id":"base","teamId":"","aliases":["base"]}')`)
	for _, q := range qs {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	db.Close()
	s, err := OpenSQLite(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for team, want := range map[string]int{"live": 1, "gone": 0} {
		sbs, err := s.ListSandboxes(ctx, SandboxFilter{TeamID: team, States: []sandbox.State{sandbox.StateKilled}})
		if err != nil || len(sbs) != want {
			t.Errorf("team %s's sandboxes after the upgrade: %d, %v; want %d", team, len(sbs), err, want)
		}
		evs, err := s.QueryEvents(ctx, EventFilter{TeamID: team})
		if err != nil || len(evs) != want {
			t.Errorf("team %s's events after the upgrade: %d, %v; want %d", team, len(evs), err, want)
		}
		ws, err := s.ListWebhooks(ctx, team)
		if err != nil || len(ws) != want {
			t.Errorf("team %s's webhooks after the upgrade: %d, %v; want %d", team, len(ws), err, want)
		}
		_, err = s.Templates().TemplateByAlias(ctx, team, "app")
		if (err == nil) != (want == 1) {
			t.Errorf("team %s's template after the upgrade: %v", team, err)
		}
	}
	if _, err := s.Templates().GetTemplate(ctx, "base"); err != nil {
		t.Errorf("system template after the upgrade: %v", err)
	}
	if err := s.CreateTeam(ctx, &Team{ID: "gone"}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("create of the deleted team's ID after the upgrade: %v, want already exists", err)
	}
	if err := s.CreateTeam(ctx, &Team{ID: "live"}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("create of the live team's ID after the upgrade: %v, want already exists", err)
	}
}

// TestUpgradeFromVersion7 opens a database left at schema version 7 (team
// IDs, before node tokens) with a team in it: migration 8 adds the node
// tokens' table, which takes a token, and the team is still there.
func TestUpgradeFromVersion7(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v7.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`}
	for _, m := range migrations[:7] {
		qs = append(qs, m.sqlite)
	}
	qs = append(qs, `INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (7, 1)`,
		`INSERT INTO teams (id, name, created_at) VALUES ('live', 'live', 1)`,
		`INSERT INTO team_ids (id, created_at, deleted_at) VALUES ('live', 1, 0)`)
	for _, q := range qs {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	db.Close()
	s, err := OpenSQLite(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v int
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil || v != SchemaVersion() || v != 10 {
		t.Fatalf("version %d, %v; want 10", v, err)
	}
	if _, err := s.GetTeam(ctx, "live"); err != nil {
		t.Errorf("team after the upgrade: %v", err)
	}
	if err := s.CreateNodeToken(ctx, &NodeToken{ID: "tok1", NodeID: "node-a", CreatedAt: time.Unix(1, 0)}); err != nil {
		t.Fatalf("node token after the upgrade: %v", err)
	}
	if toks, err := s.ListNodeTokens(ctx, "node-a"); err != nil || len(toks) != 1 {
		t.Errorf("node tokens after the upgrade: %v, %v", toks, err)
	}
}

// TestUpgradeFromVersion9 opens a database left at schema version 9
// (volumes, before secrets) with a team in it: migration 10 adds the
// secrets' table, which takes a secret of that team, and the team and its
// name stay unique per team.
func TestUpgradeFromVersion9(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v9.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`}
	for _, m := range migrations[:9] {
		qs = append(qs, m.sqlite)
	}
	qs = append(qs, `INSERT INTO schema_migrations (version, applied_at) VALUES (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1), (9, 1)`,
		`INSERT INTO teams (id, name, created_at) VALUES ('live', 'live', 1)`,
		`INSERT INTO team_ids (id, created_at, deleted_at) VALUES ('live', 1, 0)`)
	for _, q := range qs {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	db.Close()
	s, err := OpenSQLite(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v int
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil || v != SchemaVersion() || v != 10 {
		t.Fatalf("version %d, %v; want 10", v, err)
	}
	if _, err := s.GetTeam(ctx, "live"); err != nil {
		t.Errorf("team after the upgrade: %v", err)
	}
	sec := &secrets.Secret{ID: "sec_1", TeamID: "live", Name: "tok", Version: 1, Sealed: "x", KeyID: "k", CreatedAt: time.Unix(1, 0), UpdatedAt: time.Unix(1, 0)}
	if err := s.Secrets().CreateSecret(ctx, sec, 0); err != nil {
		t.Fatalf("secret after the upgrade: %v", err)
	}
	dup := *sec
	dup.ID = "sec_2"
	if err := s.Secrets().CreateSecret(ctx, &dup, 0); !errdefs.IsAlreadyExists(err) {
		t.Errorf("a second secret of the same name: %v, want already exists", err)
	}
}
