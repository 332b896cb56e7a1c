package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migration is one versioned schema change. Versions are applied in order,
// each in its own transaction, and recorded in schema_migrations. A
// released migration is never edited: add a new one.
type migration struct {
	version  int
	sqlite   string
	postgres string
}

// migrations of both dialects. Timestamps are BIGINT Unix nanoseconds (UTC)
// in both, so the two implementations share every query.
var migrations = []migration{
	{
		version: 1,
		sqlite: `
CREATE TABLE teams (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  max_concurrent INTEGER NOT NULL DEFAULT 0,
  max_timeout_ms BIGINT NOT NULL DEFAULT 0,
  max_vcpus INTEGER NOT NULL DEFAULT 0,
  max_memory_mb BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  hash TEXT NOT NULL UNIQUE,
  mask TEXT NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE TABLE sandboxes (
  id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL,
  template_id TEXT NOT NULL,
  state TEXT NOT NULL,
  epoch BIGINT NOT NULL,
  started_at BIGINT NOT NULL,
  end_at BIGINT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  killed_at BIGINT NOT NULL DEFAULT 0,
  kill_reason TEXT NOT NULL DEFAULT '',
  spec TEXT NOT NULL
);
CREATE INDEX sandboxes_team_state ON sandboxes(team_id, state);
CREATE INDEX sandboxes_state_end ON sandboxes(state, end_at);
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  sandbox_id TEXT NOT NULL,
  team_id TEXT NOT NULL,
  type TEXT NOT NULL,
  reason TEXT NOT NULL,
  epoch BIGINT NOT NULL,
  at BIGINT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX events_sandbox ON events(sandbox_id, id);
`,
		postgres: `
CREATE TABLE teams (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  max_concurrent INTEGER NOT NULL DEFAULT 0,
  max_timeout_ms BIGINT NOT NULL DEFAULT 0,
  max_vcpus INTEGER NOT NULL DEFAULT 0,
  max_memory_mb BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  hash TEXT NOT NULL UNIQUE,
  mask TEXT NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE TABLE sandboxes (
  id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL,
  template_id TEXT NOT NULL,
  state TEXT NOT NULL,
  epoch BIGINT NOT NULL,
  started_at BIGINT NOT NULL,
  end_at BIGINT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  killed_at BIGINT NOT NULL DEFAULT 0,
  kill_reason TEXT NOT NULL DEFAULT '',
  spec JSONB NOT NULL
);
CREATE INDEX sandboxes_team_state ON sandboxes(team_id, state);
CREATE INDEX sandboxes_state_end ON sandboxes(state, end_at);
CREATE TABLE events (
  id BIGSERIAL PRIMARY KEY,
  sandbox_id TEXT NOT NULL,
  team_id TEXT NOT NULL,
  type TEXT NOT NULL,
  reason TEXT NOT NULL,
  epoch BIGINT NOT NULL,
  at BIGINT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX events_sandbox ON events(sandbox_id, id);
`,
	},
	{
		// Version 2: lifecycle events carry template, build and execution
		// IDs and a data document, and are queried per team and pruned by
		// age; webhooks and their delivery outbox.
		version:  2,
		sqlite:   migration2,
		postgres: migration2,
	},
	{
		// Version 3: a team's limits bound sandbox disk, paused sandboxes
		// and snapshots too.
		version:  3,
		sqlite:   migration3,
		postgres: migration3,
	},
	{
		// Version 4: the node registry (scale-out): nodes, the capacity
		// the control plane reserved on each per sandbox, and the node
		// that holds each sandbox.
		version:  4,
		sqlite:   migration4 + `UPDATE sandboxes SET node_id = COALESCE(json_extract(spec, '$.nodeId'), '');`,
		postgres: migration4 + `UPDATE sandboxes SET node_id = COALESCE(spec->>'nodeId', '');`,
	},
	{
		// Version 5: leases, by which API replicas sharing a database
		// elect the one that runs the singletons (internal/leader); a
		// lease's requests count what the other replicas asked its holder
		// to do (e.g. reconcile after a node came back).
		version:  5,
		sqlite:   migration5,
		postgres: migration5,
	},
	{
		// Version 6: the template catalog (templates.Store), shared by
		// the replicas of `warren api`: templates with their aliases,
		// builds and build logs, each object a JSON document beside the
		// columns it is looked up by.
		version:  6,
		sqlite:   migration6,
		postgres: migration6,
	},
	{
		// Version 7: team IDs are never reused (team_ids keeps every ID
		// ever given, deleted teams' included), and what teams deleted
		// before left behind (sandbox, event, webhook and template rows)
		// goes, so that a new team cannot inherit it; team limits bound
		// builds, webhooks and template storage too.
		version:  7,
		sqlite:   migration7,
		postgres: migration7,
	},
	{
		// Version 8: node tokens (internal/nodeauth): each node's own
		// credential, bound to its ID, issued and revoked by the operator.
		version:  8,
		sqlite:   migration8,
		postgres: migration8,
	},
	{
		// Version 9: volumes, each on one node, named uniquely within its team; team limits bound
		// their number, each one's size and their sizes' sum.
		version:  9,
		sqlite:   migration9,
		postgres: migration9,
	},
	{
		// Version 10: teams' secrets (internal/secrets), each value
		// sealed under the operator's key.
		version:  10,
		sqlite:   migration10,
		postgres: migration10,
	},
}

// migration9 is plain SQL both dialects accept (volumes.go).
const migration9 = `
ALTER TABLE teams ADD COLUMN max_volumes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE teams ADD COLUMN max_volume_size_mb BIGINT NOT NULL DEFAULT 0;
ALTER TABLE teams ADD COLUMN max_volume_storage_mb BIGINT NOT NULL DEFAULT 0;
CREATE TABLE volumes (
  id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL,
  name TEXT NOT NULL,
  node_id TEXT NOT NULL,
  size_mb BIGINT NOT NULL,
  state TEXT NOT NULL,
  token TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX volumes_team_name ON volumes(team_id, name);
CREATE INDEX volumes_node ON volumes(node_id);
`

// migration10 is plain SQL both dialects accept. sealed is the value's
// nonce and ciphertext in base64; key_id names the key that sealed it.
const migration10 = `
CREATE TABLE secrets (
  id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL,
  name TEXT NOT NULL,
  version BIGINT NOT NULL,
  metadata TEXT NOT NULL,
  sealed TEXT NOT NULL,
  key_id TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  UNIQUE (team_id, name)
);
`

// migration7 is plain SQL both dialects accept. A team ID that rows name
// but no team has is one of a team deleted before this version: it is
// recorded as deleted (deleted_at 1: the time is not known) and its rows
// go. System objects (an empty team_id) are not a team's.
const migration7 = `
CREATE TABLE team_ids (
  id TEXT PRIMARY KEY,
  created_at BIGINT NOT NULL,
  deleted_at BIGINT NOT NULL DEFAULT 0
);
ALTER TABLE teams ADD COLUMN max_builds INTEGER NOT NULL DEFAULT 0;
ALTER TABLE teams ADD COLUMN max_webhooks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE teams ADD COLUMN max_template_storage_mb BIGINT NOT NULL DEFAULT 0;
INSERT INTO team_ids (id, created_at, deleted_at) SELECT id, created_at, 0 FROM teams;
INSERT INTO team_ids (id, created_at, deleted_at)
  SELECT team_id, 0, 1 FROM (
    SELECT team_id FROM sandboxes UNION SELECT team_id FROM events UNION SELECT team_id FROM webhooks
    UNION SELECT team_id FROM webhook_deliveries UNION SELECT team_id FROM templates UNION SELECT team_id FROM template_aliases
  ) orphans
  WHERE team_id <> '' AND team_id NOT IN (SELECT id FROM teams);
DELETE FROM webhook_deliveries WHERE team_id IN (SELECT id FROM team_ids WHERE deleted_at <> 0);
DELETE FROM webhooks WHERE team_id IN (SELECT id FROM team_ids WHERE deleted_at <> 0);
DELETE FROM events WHERE team_id IN (SELECT id FROM team_ids WHERE deleted_at <> 0);
DELETE FROM sandboxes WHERE team_id IN (SELECT id FROM team_ids WHERE deleted_at <> 0);
DELETE FROM template_build_logs WHERE build_id IN (SELECT b.id FROM template_builds b JOIN templates t ON t.id = b.template_id
  WHERE t.team_id IN (SELECT id FROM team_ids WHERE deleted_at <> 0));
DELETE FROM template_builds WHERE template_id IN (SELECT id FROM templates WHERE team_id IN (SELECT id FROM team_ids WHERE deleted_at <> 0));
DELETE FROM template_aliases WHERE team_id IN (SELECT id FROM team_ids WHERE deleted_at <> 0);
DELETE FROM templates WHERE team_id IN (SELECT id FROM team_ids WHERE deleted_at <> 0);
`

// migration8 is plain SQL both dialects accept.
const migration8 = `
CREATE TABLE node_tokens (
  id TEXT PRIMARY KEY,
  node_id TEXT NOT NULL,
  name TEXT NOT NULL DEFAULT '',
  created_at BIGINT NOT NULL,
  revoked_at BIGINT NOT NULL DEFAULT 0,
  last_used_at BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX node_tokens_node ON node_tokens(node_id);
`

// migration6 is plain SQL both dialects accept. An alias row per
// (team, alias) makes names unique within a team; a log line's seq
// counts from 1 within its build.
const migration6 = `
CREATE TABLE templates (
  id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  doc TEXT NOT NULL
);
CREATE TABLE template_aliases (
  team_id TEXT NOT NULL,
  alias TEXT NOT NULL,
  template_id TEXT NOT NULL,
  PRIMARY KEY (team_id, alias)
);
CREATE INDEX template_aliases_template ON template_aliases(template_id);
CREATE TABLE template_builds (
  id TEXT PRIMARY KEY,
  template_id TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  doc TEXT NOT NULL
);
CREATE INDEX template_builds_template ON template_builds(template_id, created_at);
CREATE TABLE template_build_logs (
  build_id TEXT NOT NULL,
  seq BIGINT NOT NULL,
  entry TEXT NOT NULL,
  PRIMARY KEY (build_id, seq)
);
`

// migration5 is plain SQL both dialects accept.
const migration5 = `
CREATE TABLE leases (
  name TEXT PRIMARY KEY,
  holder TEXT NOT NULL,
  expires_at BIGINT NOT NULL,
  renewed_at BIGINT NOT NULL,
  requests BIGINT NOT NULL DEFAULT 0
);
`

// migration4 is plain SQL both dialects accept (each then copies the node
// of existing sandboxes from their spec to the new column). A node's allocated_*
// columns are the sum of its node_reservations rows, kept beside them so
// that one conditional UPDATE reserves capacity without overcommitting.
const migration4 = `
ALTER TABLE sandboxes ADD COLUMN node_id TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_node ON sandboxes(node_id, state);
CREATE TABLE nodes (
  id TEXT PRIMARY KEY,
  rpc_address TEXT NOT NULL,
  proxy_address TEXT NOT NULL,
  boot_id TEXT NOT NULL,
  version TEXT NOT NULL,
  capacity_vcpus BIGINT NOT NULL,
  capacity_memory_mb BIGINT NOT NULL,
  allocated_vcpus BIGINT NOT NULL DEFAULT 0,
  allocated_memory_mb BIGINT NOT NULL DEFAULT 0,
  reported_vcpus BIGINT NOT NULL DEFAULT 0,
  reported_memory_mb BIGINT NOT NULL DEFAULT 0,
  reported_sandboxes INTEGER NOT NULL DEFAULT 0,
  templates TEXT NOT NULL DEFAULT '[]',
  pools TEXT NOT NULL DEFAULT '[]',
  admin_status TEXT NOT NULL DEFAULT '',
  liveness TEXT NOT NULL DEFAULT 'ready',
  registered_at BIGINT NOT NULL,
  last_heartbeat BIGINT NOT NULL
);
CREATE TABLE node_reservations (
  sandbox_id TEXT PRIMARY KEY,
  node_id TEXT NOT NULL,
  vcpus BIGINT NOT NULL,
  memory_mb BIGINT NOT NULL,
  created_at BIGINT NOT NULL
);
CREATE INDEX node_reservations_node ON node_reservations(node_id);
`

// migration3 is plain SQL both dialects accept.
const migration3 = `
ALTER TABLE teams ADD COLUMN max_disk_mb BIGINT NOT NULL DEFAULT 0;
ALTER TABLE teams ADD COLUMN max_paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE teams ADD COLUMN max_snapshots INTEGER NOT NULL DEFAULT 0;
`

// migration2 is plain SQL both dialects accept (TEXT and BIGINT columns,
// ids chosen by the application).
const migration2 = `
ALTER TABLE events ADD COLUMN template_id TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN build_id TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN execution_id TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN uid TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN data TEXT NOT NULL DEFAULT '';
CREATE INDEX events_team ON events(team_id, id);
CREATE INDEX events_at ON events(at);
CREATE TABLE webhooks (
  id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL,
  name TEXT NOT NULL,
  url TEXT NOT NULL,
  events TEXT NOT NULL,
  secret TEXT NOT NULL,
  enabled INTEGER NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX webhooks_team ON webhooks(team_id);
CREATE TABLE webhook_deliveries (
  id TEXT PRIMARY KEY,
  webhook_id TEXT NOT NULL,
  team_id TEXT NOT NULL,
  event_id BIGINT NOT NULL,
  state TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_at BIGINT NOT NULL,
  last_status INTEGER NOT NULL DEFAULT 0,
  last_error TEXT NOT NULL DEFAULT '',
  created_at BIGINT NOT NULL,
  delivered_at BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(state, next_at);
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries(webhook_id, created_at);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries(event_id);
`

// migrate applies the migrations newer than the database's version.
func migrate(ctx context.Context, db *sql.DB, d dialect) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	if d.name == "postgres" {
		// Serialise concurrent migrators (several API replicas starting).
		if _, err := db.ExecContext(ctx, `SELECT pg_advisory_lock(7461737)`); err != nil {
			return fmt.Errorf("migration lock: %w", err)
		}
		defer db.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(7461737)`)
	}
	var current int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		body := m.sqlite
		if d.name == "postgres" {
			body = m.postgres
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
		if _, err := tx.ExecContext(ctx, body); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
		if _, err := tx.ExecContext(ctx, d.rebind(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`), m.version, nowNanos()); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
	}
	return nil
}

// SchemaVersion is the version the newest migration brings a database to.
func SchemaVersion() int { return migrations[len(migrations)-1].version }
