package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// execer is what *sql.DB and *sql.Tx share.
type execer interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

const eventCols = `id, uid, sandbox_id, team_id, template_id, build_id, execution_id, type, reason, epoch, at, message, data`

func scanEvent(sc interface{ Scan(...any) error }) (*Event, error) {
	var e Event
	var reason, data string
	var at int64
	if err := sc.Scan(&e.ID, &e.UID, &e.SandboxID, &e.TeamID, &e.TemplateID, &e.BuildID, &e.ExecutionID,
		&e.Type, &reason, &e.Epoch, &at, &e.Message, &data); err != nil {
		return nil, err
	}
	e.Reason, e.At = sandbox.KillReason(reason), fromNanos(at)
	if data != "" {
		if err := json.Unmarshal([]byte(data), &e.Data); err != nil {
			return nil, fmt.Errorf("event %d: decode data: %w", e.ID, err)
		}
	}
	return &e, nil
}

// NewUID returns a random UUID-shaped ID (version 4) for events and
// deliveries.
func NewUID() string {
	h := sandbox.RandomToken(16)
	b := []byte(h)
	b[12] = '4'
	b[16] = "89ab"[b[16]%4]
	return string(b[0:8]) + "-" + string(b[8:12]) + "-" + string(b[12:16]) + "-" + string(b[16:20]) + "-" + string(b[20:32])
}

// AppendEvent implements Store.
func (s *SQL) AppendEvent(ctx context.Context, e *Event) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, fmt.Sprintf("sandbox %q event", e.SandboxID))
	}
	defer tx.Rollback()
	if err := s.appendEventTx(ctx, tx, e); err != nil {
		return err
	}
	return classify(tx.Commit(), fmt.Sprintf("sandbox %q event", e.SandboxID))
}

// appendEventTx inserts e and its outbox rows within tx.
func (s *SQL) appendEventTx(ctx context.Context, tx execer, e *Event) error {
	what := fmt.Sprintf("sandbox %q event %s", e.SandboxID, e.Type)
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	if e.UID == "" {
		e.UID = NewUID()
	}
	if e.Reason != "" && e.Data.KillReason == "" {
		e.Data.KillReason = e.Reason.String()
	}
	data, err := json.Marshal(e.Data)
	if err != nil {
		return fmt.Errorf("%s: encode data: %w", what, err)
	}
	q := s.d.rebind(`INSERT INTO events (uid, sandbox_id, team_id, template_id, build_id, execution_id, type, reason, epoch, at, message, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`)
	if err := tx.QueryRowContext(ctx, q, e.UID, e.SandboxID, e.TeamID, e.TemplateID, e.BuildID, e.ExecutionID, e.Type,
		string(e.Reason), e.Epoch, toNanos(e.At), e.Message, string(data)).Scan(&e.ID); err != nil {
		return classify(err, what)
	}
	if e.TeamID == "" {
		return nil
	}
	hooks, err := listWebhooks(ctx, tx, s.d, e.TeamID)
	if err != nil {
		return classify(err, what)
	}
	now := toNanos(time.Now())
	for _, w := range hooks {
		if !w.Matches(e.Type) {
			continue
		}
		if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO webhook_deliveries (id, webhook_id, team_id, event_id, state, attempts, next_at, created_at) VALUES (?, ?, ?, ?, ?, 0, ?, ?)`),
			NewUID(), w.ID, w.TeamID, e.ID, DeliveryPending, now, now); err != nil {
			return classify(err, what+" delivery")
		}
	}
	return nil
}

// ListEvents implements Store.
func (s *SQL) ListEvents(ctx context.Context, sandboxID string) ([]*Event, error) {
	return s.queryEvents(ctx, `SELECT `+eventCols+` FROM events WHERE sandbox_id = ? ORDER BY id`, sandboxID)
}

func (s *SQL) queryEvents(ctx context.Context, q string, args ...any) ([]*Event, error) {
	rows, err := s.db.QueryContext(ctx, s.d.rebind(q), args...)
	if err != nil {
		return nil, classify(err, "events")
	}
	defer rows.Close()
	var out []*Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, classify(err, "events")
		}
		out = append(out, e)
	}
	return out, classify(rows.Err(), "events")
}

// QueryEvents implements Store.
func (s *SQL) QueryEvents(ctx context.Context, f EventFilter) ([]*Event, error) {
	if f.TeamID == "" && f.SandboxID == "" {
		return nil, fmt.Errorf("events: a team or a sandbox is required: %w", errdefs.ErrInvalid)
	}
	var where []string
	var args []any
	if f.TeamID != "" {
		where, args = append(where, "team_id = ?"), append(args, f.TeamID)
	}
	if f.SandboxID != "" {
		where, args = append(where, "sandbox_id = ?"), append(args, f.SandboxID)
	}
	if len(f.Types) > 0 {
		ph := make([]string, len(f.Types))
		for i, t := range f.Types {
			ph[i] = "?"
			args = append(args, t)
		}
		where = append(where, "type IN ("+strings.Join(ph, ", ")+")")
	}
	if !f.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, toNanos(f.Since))
	}
	if !f.Until.IsZero() {
		where, args = append(where, "at < ?"), append(args, toNanos(f.Until))
	}
	if f.AfterID > 0 {
		where, args = append(where, "id > ?"), append(args, f.AfterID)
	}
	if f.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, f.BeforeID)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	order := "ASC"
	if f.Desc {
		order = "DESC"
	}
	q := `SELECT ` + eventCols + ` FROM events WHERE ` + strings.Join(where, " AND ") + ` ORDER BY id ` + order + fmt.Sprintf(` LIMIT %d OFFSET %d`, f.Limit, max(f.Offset, 0))
	return s.queryEvents(ctx, q, args...)
}

// GetEvent implements Store.
func (s *SQL) GetEvent(ctx context.Context, id int64) (*Event, error) {
	e, err := scanEvent(s.db.QueryRowContext(ctx, s.d.rebind(`SELECT `+eventCols+` FROM events WHERE id = ?`), id))
	return e, classify(err, fmt.Sprintf("event %d", id))
}

// PruneSandboxes implements Store.
func (s *SQL) PruneSandboxes(ctx context.Context, before time.Time) (int, error) {
	// A killed row without a kill time (none is written so) ages by its
	// last update.
	cut := toNanos(before)
	res, err := s.db.ExecContext(ctx, s.d.rebind(`DELETE FROM sandboxes WHERE state = ? AND
		((killed_at > 0 AND killed_at < ?) OR (killed_at = 0 AND updated_at < ?))`),
		string(sandbox.StateKilled), cut, cut)
	if err != nil {
		return 0, classify(err, "prune killed sandboxes")
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// PruneEvents implements Store.
func (s *SQL) PruneEvents(ctx context.Context, before time.Time) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, classify(err, "prune events")
	}
	defer tx.Rollback()
	cut := toNanos(before)
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM events WHERE at < ?)`), cut); err != nil {
		return 0, classify(err, "prune deliveries")
	}
	res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM events WHERE at < ?`), cut)
	if err != nil {
		return 0, classify(err, "prune events")
	}
	n, _ := res.RowsAffected()
	return int(n), classify(tx.Commit(), "prune events")
}
