package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

const webhookCols = `id, team_id, name, url, events, secret, enabled, created_at, updated_at`

func scanWebhook(sc interface{ Scan(...any) error }) (*Webhook, error) {
	var w Webhook
	var events string
	var enabled int
	var created, updated int64
	if err := sc.Scan(&w.ID, &w.TeamID, &w.Name, &w.URL, &events, &w.Secret, &enabled, &created, &updated); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(events), &w.Events); err != nil {
		return nil, fmt.Errorf("webhook %q: decode events: %w", w.ID, err)
	}
	w.Enabled = enabled != 0
	w.CreatedAt, w.UpdatedAt = fromNanos(created), fromNanos(updated)
	return &w, nil
}

func listWebhooks(ctx context.Context, q execer, d dialect, teamID string) ([]*Webhook, error) {
	rows, err := q.QueryContext(ctx, d.rebind(`SELECT `+webhookCols+` FROM webhooks WHERE team_id = ? ORDER BY created_at, id`), teamID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func encodeEvents(ev []string) string {
	if ev == nil {
		ev = []string{}
	}
	b, _ := json.Marshal(ev)
	return string(b)
}

// CreateWebhook implements Store.
func (s *SQL) CreateWebhook(ctx context.Context, w *Webhook) error {
	now := time.Now().UTC()
	if w.CreatedAt.IsZero() {
		w.CreatedAt = now
	}
	w.UpdatedAt = now
	_, err := s.db.ExecContext(ctx, s.d.rebind(`INSERT INTO webhooks (`+webhookCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		w.ID, w.TeamID, w.Name, w.URL, encodeEvents(w.Events), w.Secret, boolInt(w.Enabled), toNanos(w.CreatedAt), toNanos(w.UpdatedAt))
	return classify(err, fmt.Sprintf("webhook %q", w.ID))
}

// CreateWebhookWithin implements Store.
func (s *SQL) CreateWebhookWithin(ctx context.Context, w *Webhook, limit int) error {
	if limit <= 0 {
		return s.CreateWebhook(ctx, w)
	}
	what := fmt.Sprintf("webhook %q", w.ID)
	now := time.Now().UTC()
	if w.CreatedAt.IsZero() {
		w.CreatedAt = now
	}
	w.UpdatedAt = now
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	if s.d.name == "postgres" {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('warren-webhooks:' || $1))`, w.TeamID); err != nil {
			return classify(err, what)
		}
	}
	var n int
	if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM webhooks WHERE team_id = ?`), w.TeamID).Scan(&n); err != nil {
		return classify(err, what)
	}
	if n >= limit {
		return errdefs.Publicf(errdefs.ErrExhausted, "the team has %d webhooks, the most it may register (%d); delete one or ask for a higher limit", n, limit)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`INSERT INTO webhooks (`+webhookCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		w.ID, w.TeamID, w.Name, w.URL, encodeEvents(w.Events), w.Secret, boolInt(w.Enabled), toNanos(w.CreatedAt), toNanos(w.UpdatedAt)); err != nil {
		return classify(err, what)
	}
	return classify(tx.Commit(), what)
}

// GetWebhook implements Store.
func (s *SQL) GetWebhook(ctx context.Context, teamID, id string) (*Webhook, error) {
	w, err := scanWebhook(s.db.QueryRowContext(ctx, s.d.rebind(`SELECT `+webhookCols+` FROM webhooks WHERE id = ? AND team_id = ?`), id, teamID))
	return w, classify(err, fmt.Sprintf("webhook %q", id))
}

// ListWebhooks implements Store.
func (s *SQL) ListWebhooks(ctx context.Context, teamID string) ([]*Webhook, error) {
	out, err := listWebhooks(ctx, s.db, s.d, teamID)
	return out, classify(err, "webhooks")
}

// UpdateWebhook implements Store.
func (s *SQL) UpdateWebhook(ctx context.Context, w *Webhook) error {
	w.UpdatedAt = time.Now().UTC()
	res, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE webhooks SET name = ?, url = ?, events = ?, secret = ?, enabled = ?, updated_at = ? WHERE id = ? AND team_id = ?`),
		w.Name, w.URL, encodeEvents(w.Events), w.Secret, boolInt(w.Enabled), toNanos(w.UpdatedAt), w.ID, w.TeamID)
	if err != nil {
		return classify(err, fmt.Sprintf("webhook %q", w.ID))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.Publicf(errdefs.ErrNotFound, "webhook %q", w.ID)
	}
	return nil
}

// DeleteWebhook implements Store. Its pending deliveries go with it.
func (s *SQL) DeleteWebhook(ctx context.Context, teamID, id string) error {
	what := fmt.Sprintf("webhook %q", id)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM webhooks WHERE id = ? AND team_id = ?`), id, teamID)
	if err != nil {
		return classify(err, what)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM webhook_deliveries WHERE webhook_id = ?`), id); err != nil {
		return classify(err, what)
	}
	return classify(tx.Commit(), what)
}

const deliveryCols = `id, webhook_id, team_id, event_id, state, attempts, next_at, last_status, last_error, created_at, delivered_at`

func scanDelivery(sc interface{ Scan(...any) error }) (*Delivery, error) {
	var d Delivery
	var next, created, delivered int64
	if err := sc.Scan(&d.ID, &d.WebhookID, &d.TeamID, &d.EventID, &d.State, &d.Attempts, &next, &d.LastStatus, &d.LastError, &created, &delivered); err != nil {
		return nil, err
	}
	d.NextAt, d.CreatedAt, d.DeliveredAt = fromNanos(next), fromNanos(created), fromNanos(delivered)
	return &d, nil
}

func (s *SQL) queryDeliveries(ctx context.Context, q execer, query string, args ...any) ([]*Delivery, error) {
	rows, err := q.QueryContext(ctx, s.d.rebind(query), args...)
	if err != nil {
		return nil, classify(err, "deliveries")
	}
	defer rows.Close()
	var out []*Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, classify(err, "deliveries")
		}
		out = append(out, d)
	}
	return out, classify(rows.Err(), "deliveries")
}

// ClaimDeliveries implements Store. Each claim is a conditional update, so
// two dispatchers (two API replicas on one Postgres) never both hold one.
func (s *SQL) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]*Delivery, error) {
	due, err := s.queryDeliveries(ctx, s.db, `SELECT `+deliveryCols+` FROM webhook_deliveries WHERE state = ? AND next_at <= ? ORDER BY next_at, created_at LIMIT ?`,
		DeliveryPending, toNanos(now), limit)
	if err != nil {
		return nil, err
	}
	until := toNanos(now.Add(lease))
	var out []*Delivery
	for _, d := range due {
		res, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE webhook_deliveries SET next_at = ? WHERE id = ? AND state = ? AND next_at = ?`),
			until, d.ID, DeliveryPending, toNanos(d.NextAt))
		if err != nil {
			return out, classify(err, fmt.Sprintf("delivery %q", d.ID))
		}
		if n, _ := res.RowsAffected(); n == 1 {
			d.NextAt = fromNanos(until)
			out = append(out, d)
		}
	}
	return out, nil
}

// ClaimFairDeliveries implements Store: the due deliveries numbered
// within their team by due time, taken by that number first, so each
// team's first due delivery comes before any team's second.
func (s *SQL) ClaimFairDeliveries(ctx context.Context, now time.Time, lease time.Duration, c DeliveryClaim) ([]*Delivery, error) {
	if c.Limit <= 0 || c.PerTeam <= 0 {
		return nil, nil
	}
	q := `SELECT ` + deliveryCols + ` FROM (SELECT ` + deliveryCols + `, ROW_NUMBER() OVER (PARTITION BY team_id ORDER BY next_at, created_at) AS turn
		FROM webhook_deliveries WHERE state = ? AND next_at <= ?`
	args := []any{DeliveryPending, toNanos(now)}
	for team, room := range c.Room {
		if room <= 0 {
			q += ` AND team_id <> ?`
			args = append(args, team)
		}
	}
	q += `) due WHERE turn <= ? ORDER BY turn, next_at, created_at LIMIT ?`
	args = append(args, c.PerTeam, c.Limit)
	due, err := s.queryDeliveries(ctx, s.db, q, args...)
	if err != nil {
		return nil, err
	}
	taken := map[string]int{}
	until := toNanos(now.Add(lease))
	var out []*Delivery
	for _, d := range due {
		if room, ok := c.Room[d.TeamID]; ok && taken[d.TeamID] >= room {
			continue
		}
		res, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE webhook_deliveries SET next_at = ? WHERE id = ? AND state = ? AND next_at = ?`),
			until, d.ID, DeliveryPending, toNanos(d.NextAt))
		if err != nil {
			return out, classify(err, fmt.Sprintf("delivery %q", d.ID))
		}
		if n, _ := res.RowsAffected(); n == 1 {
			d.NextAt = fromNanos(until)
			taken[d.TeamID]++
			out = append(out, d)
		}
	}
	return out, nil
}

// RecordAttempt implements Store.
func (s *SQL) RecordAttempt(ctx context.Context, d *Delivery) error {
	_, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE webhook_deliveries SET state = ?, attempts = ?, next_at = ?, last_status = ?, last_error = ?, delivered_at = ? WHERE id = ?`),
		d.State, d.Attempts, toNanos(d.NextAt), d.LastStatus, d.LastError, toNanos(d.DeliveredAt), d.ID)
	return classify(err, fmt.Sprintf("delivery %q", d.ID))
}

// ListDeliveries implements Store.
func (s *SQL) ListDeliveries(ctx context.Context, teamID, webhookID string, limit int) ([]*Delivery, error) {
	if limit <= 0 {
		limit = 100
	}
	return s.queryDeliveries(ctx, s.db, `SELECT `+deliveryCols+` FROM webhook_deliveries WHERE team_id = ? AND webhook_id = ? ORDER BY created_at DESC, id LIMIT ?`,
		teamID, webhookID, limit)
}

// Redeliver implements Store.
func (s *SQL) Redeliver(ctx context.Context, teamID, webhookID, deliveryID string) (*Delivery, error) {
	what := fmt.Sprintf("delivery %q", deliveryID)
	res, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE webhook_deliveries SET state = ?, next_at = ? WHERE id = ? AND webhook_id = ? AND team_id = ?`),
		DeliveryPending, nowNanos(), deliveryID, webhookID, teamID)
	if err != nil {
		return nil, classify(err, what)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	d, err := scanDelivery(s.db.QueryRowContext(ctx, s.d.rebind(`SELECT `+deliveryCols+` FROM webhook_deliveries WHERE id = ?`), deliveryID))
	return d, classify(err, what)
}

// NextDeliveryAt implements Store.
func (s *SQL) NextDeliveryAt(ctx context.Context) (time.Time, error) {
	var n *int64
	err := s.db.QueryRowContext(ctx, s.d.rebind(`SELECT MIN(next_at) FROM webhook_deliveries WHERE state = ?`), DeliveryPending).Scan(&n)
	if err != nil || n == nil {
		return time.Time{}, classify(err, "deliveries")
	}
	return fromNanos(*n), nil
}
