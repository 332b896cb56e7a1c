package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

const teamCols = `id, name, created_at, max_concurrent, max_timeout_ms, max_vcpus, max_memory_mb, max_disk_mb, max_paused, max_snapshots, max_builds, max_webhooks, max_template_storage_mb, max_volumes, max_volume_size_mb, max_volume_storage_mb`

// CreateTeam implements Store. A team ID is given once: team_ids keeps
// every ID ever created, so the ID of a deleted team is refused
// (ErrAlreadyExists) and nothing a deleted team left can reach a new one.
func (s *SQL) CreateTeam(ctx context.Context, t *Team) error {
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now().UTC()
	}
	what := fmt.Sprintf("team %q", t.ID)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	var deleted int64
	switch err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT deleted_at FROM team_ids WHERE id = ?`), t.ID).Scan(&deleted); {
	case err == nil && deleted != 0:
		return errdefs.Publicf(errdefs.ErrAlreadyExists, "team id %q belonged to a deleted team; team IDs are not reused", t.ID)
	case err == nil:
		return errdefs.Publicf(errdefs.ErrAlreadyExists, "%s", what)
	case !errors.Is(err, sql.ErrNoRows):
		return classify(err, what)
	}
	// Of two creates of one ID, the primary key lets one through.
	if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO team_ids (id, created_at) VALUES (?, ?)`), t.ID, toNanos(t.CreatedAt)); err != nil {
		return classify(err, what)
	}
	l := t.Limits
	if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO teams (`+teamCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		t.ID, t.Name, toNanos(t.CreatedAt), l.MaxConcurrent, l.MaxTimeout.Milliseconds(), l.MaxVCPUs, l.MaxMemoryMB,
		l.MaxDiskMB, l.MaxPaused, l.MaxSnapshots, l.MaxBuilds, l.MaxWebhooks, l.MaxTemplateStorageMB,
		l.MaxVolumes, l.MaxVolumeSizeMB, l.MaxVolumeStorageMB); err != nil {
		return classify(err, what)
	}
	return classify(tx.Commit(), what)
}

func scanTeam(sc interface{ Scan(...any) error }) (*Team, error) {
	var t Team
	var created, maxTimeout int64
	l := &t.Limits
	if err := sc.Scan(&t.ID, &t.Name, &created, &l.MaxConcurrent, &maxTimeout, &l.MaxVCPUs, &l.MaxMemoryMB,
		&l.MaxDiskMB, &l.MaxPaused, &l.MaxSnapshots, &l.MaxBuilds, &l.MaxWebhooks, &l.MaxTemplateStorageMB,
		&l.MaxVolumes, &l.MaxVolumeSizeMB, &l.MaxVolumeStorageMB); err != nil {
		return nil, err
	}
	t.CreatedAt = fromNanos(created)
	l.MaxTimeout = time.Duration(maxTimeout) * time.Millisecond
	return &t, nil
}

// GetTeam implements Store.
func (s *SQL) GetTeam(ctx context.Context, id string) (*Team, error) {
	t, err := scanTeam(s.db.QueryRowContext(ctx, s.d.rebind(`SELECT `+teamCols+` FROM teams WHERE id = ?`), id))
	return t, classify(err, fmt.Sprintf("team %q", id))
}

// ListTeams implements Store.
func (s *SQL) ListTeams(ctx context.Context) ([]*Team, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+teamCols+` FROM teams ORDER BY created_at, id`)
	if err != nil {
		return nil, classify(err, "teams")
	}
	defer rows.Close()
	var out []*Team
	for rows.Next() {
		t, err := scanTeam(rows)
		if err != nil {
			return nil, classify(err, "teams")
		}
		out = append(out, t)
	}
	return out, classify(rows.Err(), "teams")
}

// UpdateTeam implements Store.
func (s *SQL) UpdateTeam(ctx context.Context, id string, fn func(*Team) error) (*Team, error) {
	what := fmt.Sprintf("team %q", id)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify(err, what)
	}
	defer tx.Rollback()
	q := `SELECT ` + teamCols + ` FROM teams WHERE id = ?`
	if s.d.name == "postgres" {
		q += ` FOR UPDATE`
	}
	t, err := scanTeam(tx.QueryRowContext(ctx, s.d.rebind(q), id))
	if err != nil {
		return nil, classify(err, what)
	}
	if err := fn(t); err != nil {
		return nil, err
	}
	t.ID = id
	l := t.Limits
	if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE teams SET name = ?, max_concurrent = ?, max_timeout_ms = ?, max_vcpus = ?, max_memory_mb = ?, max_disk_mb = ?, max_paused = ?, max_snapshots = ?, max_builds = ?, max_webhooks = ?, max_template_storage_mb = ?, max_volumes = ?, max_volume_size_mb = ?, max_volume_storage_mb = ? WHERE id = ?`),
		t.Name, l.MaxConcurrent, l.MaxTimeout.Milliseconds(), l.MaxVCPUs, l.MaxMemoryMB, l.MaxDiskMB, l.MaxPaused, l.MaxSnapshots,
		l.MaxBuilds, l.MaxWebhooks, l.MaxTemplateStorageMB, l.MaxVolumes, l.MaxVolumeSizeMB, l.MaxVolumeStorageMB, id); err != nil {
		return nil, classify(err, what)
	}
	return t, classify(tx.Commit(), what)
}

// DeleteTeam implements Store. In one transaction it removes the team,
// its keys, webhooks and their deliveries, its events, the rows of its
// (killed) sandboxes and its templates' records in this database (the
// catalog of `warren api`), and marks its ID deleted in team_ids, never
// to be given again.
func (s *SQL) DeleteTeam(ctx context.Context, id string) error {
	what := fmt.Sprintf("team %q", id)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback()
	if s.d.name == "postgres" {
		// The same lock creates take (CreateSandboxWithin): no sandbox
		// of the team starts while it goes; and the catalog's, whose
		// rows of the team go too.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('warren-team:' || $1))`, id); err != nil {
			return classify(err, what)
		}
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('warren-templates'))`); err != nil {
			return classify(err, what)
		}
	}
	n, err := s.countSandboxes(ctx, tx, id, LiveStates...)
	if err != nil {
		return err
	}
	if n > 0 {
		return errdefs.Publicf(errdefs.ErrConflict, "%s has %d sandboxes that are not killed", what, n)
	}
	// A volume's data is on its node: it goes through the node first.
	if n, err := s.countVolumes(ctx, tx, id); err != nil {
		return err
	} else if n > 0 {
		return fmt.Errorf("%s has %d volumes; destroy them first: %w", what, n, errdefs.ErrConflict)
	}
	res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM teams WHERE id = ?`), id)
	if err != nil {
		return classify(err, what)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	for _, q := range teamRows {
		if _, err := tx.ExecContext(ctx, s.d.rebind(q), id); err != nil {
			return classify(err, what)
		}
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE team_ids SET deleted_at = ? WHERE id = ?`), nowNanos(), id); err != nil {
		return classify(err, what)
	}
	return classify(tx.Commit(), what)
}

// teamRows delete every row of team ? (but its team_ids row), children
// first.
var teamRows = []string{
	`DELETE FROM secrets WHERE team_id = ?`,
	`DELETE FROM webhook_deliveries WHERE team_id = ?`,
	`DELETE FROM webhooks WHERE team_id = ?`,
	`DELETE FROM api_keys WHERE team_id = ?`,
	`DELETE FROM events WHERE team_id = ?`,
	`DELETE FROM sandboxes WHERE team_id = ?`,
	`DELETE FROM template_build_logs WHERE build_id IN (SELECT b.id FROM template_builds b JOIN templates t ON t.id = b.template_id WHERE t.team_id = ?)`,
	`DELETE FROM template_builds WHERE template_id IN (SELECT id FROM templates WHERE team_id = ?)`,
	`DELETE FROM template_aliases WHERE team_id = ?`,
	`DELETE FROM templates WHERE team_id = ?`,
}
