package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/secrets"
)

// SecretStore is the teams' secrets (secrets.Store) in the same database.
type SecretStore struct{ s *SQL }

var _ secrets.Store = (*SecretStore)(nil)

// Secrets returns the store of the teams' secrets.
func (s *SQL) Secrets() *SecretStore { return &SecretStore{s: s} }

const secretCols = `id, team_id, name, version, metadata, sealed, key_id, created_at, updated_at`

func scanSecret(sc interface{ Scan(...any) error }) (*secrets.Secret, error) {
	var x secrets.Secret
	var md string
	var created, updated int64
	if err := sc.Scan(&x.ID, &x.TeamID, &x.Name, &x.Version, &md, &x.Sealed, &x.KeyID, &created, &updated); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(md), &x.Metadata); err != nil {
		return nil, fmt.Errorf("secret %q: decode metadata: %w", x.ID, err)
	}
	x.CreatedAt, x.UpdatedAt = fromNanos(created), fromNanos(updated)
	return &x, nil
}

func encodeMetadata(md map[string]string) string {
	if md == nil {
		md = map[string]string{}
	}
	b, _ := json.Marshal(md)
	return string(b)
}

// refColumn is the column ref is looked up by: an ID or a name.
func refColumn(ref string) string {
	if strings.HasPrefix(ref, secrets.IDPrefix) {
		return "id"
	}
	return "name"
}

// CreateSecret implements secrets.Store.
func (t *SecretStore) CreateSecret(ctx context.Context, x *secrets.Secret, limit int) error {
	s := t.s
	what := fmt.Sprintf("secret %q", x.Name)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	if s.d.name == "postgres" {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('warren-secrets:' || $1))`, x.TeamID); err != nil {
			return classify(err, what)
		}
	}
	if limit > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM secrets WHERE team_id = ?`), x.TeamID).Scan(&n); err != nil {
			return classify(err, what)
		}
		if n >= limit {
			return errdefs.Publicf(errdefs.ErrExhausted, "the team has %d secrets, the most it may keep (%d); destroy one first", n, limit)
		}
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO secrets (`+secretCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		x.ID, x.TeamID, x.Name, x.Version, encodeMetadata(x.Metadata), x.Sealed, x.KeyID, toNanos(x.CreatedAt), toNanos(x.UpdatedAt)); err != nil {
		return classify(err, what)
	}
	return classify(tx.Commit(), what)
}

// GetSecret implements secrets.Store.
func (t *SecretStore) GetSecret(ctx context.Context, teamID, ref string) (*secrets.Secret, error) {
	s := t.s
	x, err := scanSecret(s.db.QueryRowContext(ctx, s.d.rebind(`SELECT `+secretCols+` FROM secrets WHERE team_id = ? AND `+refColumn(ref)+` = ?`), teamID, ref))
	return x, classify(err, fmt.Sprintf("secret %q", ref))
}

// UpdateSecret implements secrets.Store.
func (t *SecretStore) UpdateSecret(ctx context.Context, teamID, ref string, fn func(*secrets.Secret) error) (*secrets.Secret, error) {
	s := t.s
	what := fmt.Sprintf("secret %q", ref)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	x, err := scanSecret(tx.QueryRowContext(ctx, s.d.rebind(`SELECT `+secretCols+` FROM secrets WHERE team_id = ? AND `+refColumn(ref)+` = ?`+s.d.forUpdate), teamID, ref))
	if err != nil {
		return nil, classify(err, what)
	}
	id, team := x.ID, x.TeamID
	if err := fn(x); err != nil {
		return nil, err
	}
	x.ID, x.TeamID = id, team
	if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE secrets SET name = ?, version = ?, metadata = ?, sealed = ?, key_id = ?, updated_at = ? WHERE id = ?`),
		x.Name, x.Version, encodeMetadata(x.Metadata), x.Sealed, x.KeyID, toNanos(x.UpdatedAt), x.ID); err != nil {
		return nil, classify(err, what)
	}
	return x, classify(tx.Commit(), what)
}

// DeleteSecret implements secrets.Store.
func (t *SecretStore) DeleteSecret(ctx context.Context, teamID, ref string) error {
	s := t.s
	what := fmt.Sprintf("secret %q", ref)
	res, err := s.db.ExecContext(ctx, s.d.rebind(`DELETE FROM secrets WHERE team_id = ? AND `+refColumn(ref)+` = ?`), teamID, ref)
	if err != nil {
		return classify(err, what)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	}
	return nil
}

// ListSecrets implements secrets.Store.
func (t *SecretStore) ListSecrets(ctx context.Context, teamID, after string, limit int) ([]*secrets.Secret, error) {
	s := t.s
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT `+secretCols+` FROM secrets WHERE team_id = ? AND name > ? ORDER BY name LIMIT ?`), teamID, after, limit)
	if err != nil {
		return nil, classify(err, "secrets")
	}
	defer rows.Close()
	var out []*secrets.Secret
	for rows.Next() {
		x, err := scanSecret(rows)
		if err != nil {
			return nil, classify(err, "secrets")
		}
		out = append(out, x)
	}
	return out, classify(rows.Err(), "secrets")
}
