package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
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
