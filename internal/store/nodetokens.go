package store

import (
	"context"
	"fmt"
	"time"
)

// NodeToken is the record of one node's token (internal/nodeauth): the
// token itself is never stored, only what it is made from and checked
// against (its ID and node ID, under the control plane's key).
type NodeToken struct {
	ID     string
	NodeID string
	// Name is the operator's note ("rotated 2026-03").
	Name      string
	CreatedAt time.Time
	// RevokedAt is when the operator revoked it; zero while it is good.
	RevokedAt time.Time
	// LastUsedAt is when the node last authenticated with it (a heartbeat
	// or a question), to a few seconds; zero if never.
	LastUsedAt time.Time
}

// Revoked reports whether the token was revoked.
func (t *NodeToken) Revoked() bool { return !t.RevokedAt.IsZero() }

// NodeTokens is the store's part for node tokens (implemented by *SQL).
type NodeTokens interface {
	// CreateNodeToken stores t (ID, NodeID, Name; CreatedAt set here).
	CreateNodeToken(ctx context.Context, t *NodeToken) error
	// GetNodeToken returns one token's record (ErrNotFound).
	GetNodeToken(ctx context.Context, id string) (*NodeToken, error)
	// ListNodeTokens returns node nodeID's tokens ("" for every node's),
	// oldest first.
	ListNodeTokens(ctx context.Context, nodeID string) ([]*NodeToken, error)
	// RevokeNodeToken revokes token id (again: a no-op) and returns it.
	RevokeNodeToken(ctx context.Context, id string) (*NodeToken, error)
	// TouchNodeToken records that token id was used at.
	TouchNodeToken(ctx context.Context, id string, at time.Time) error
}

var _ NodeTokens = (*SQL)(nil)

const nodeTokenCols = `id, node_id, name, created_at, revoked_at, last_used_at`

func scanNodeToken(sc interface{ Scan(...any) error }) (*NodeToken, error) {
	var t NodeToken
	var created, revoked, used int64
	if err := sc.Scan(&t.ID, &t.NodeID, &t.Name, &created, &revoked, &used); err != nil {
		return nil, err
	}
	t.CreatedAt, t.RevokedAt, t.LastUsedAt = fromNanos(created), fromNanos(revoked), fromNanos(used)
	return &t, nil
}

// CreateNodeToken implements NodeTokens.
func (s *SQL) CreateNodeToken(ctx context.Context, t *NodeToken) error {
	t.CreatedAt = time.Now().UTC()
	_, err := s.db.ExecContext(ctx, s.d.rebind(`INSERT INTO node_tokens (`+nodeTokenCols+`) VALUES (?, ?, ?, ?, 0, 0)`),
		t.ID, t.NodeID, t.Name, toNanos(t.CreatedAt))
	return classify(err, fmt.Sprintf("node token %q", t.ID))
}

// GetNodeToken implements NodeTokens.
func (s *SQL) GetNodeToken(ctx context.Context, id string) (*NodeToken, error) {
	t, err := scanNodeToken(s.db.QueryRowContext(ctx, s.d.rebind(`SELECT `+nodeTokenCols+` FROM node_tokens WHERE id = ?`), id))
	return t, classify(err, fmt.Sprintf("node token %q", id))
}

// ListNodeTokens implements NodeTokens.
func (s *SQL) ListNodeTokens(ctx context.Context, nodeID string) ([]*NodeToken, error) {
	q, args := `SELECT `+nodeTokenCols+` FROM node_tokens`, []any{}
	if nodeID != "" {
		q, args = q+` WHERE node_id = ?`, append(args, nodeID)
	}
	rows, err := s.db.QueryContext(ctx, s.d.rebind(q+` ORDER BY created_at, id`), args...)
	if err != nil {
		return nil, classify(err, "node tokens")
	}
	defer rows.Close()
	var out []*NodeToken
	for rows.Next() {
		t, err := scanNodeToken(rows)
		if err != nil {
			return nil, classify(err, "node tokens")
		}
		out = append(out, t)
	}
	return out, classify(rows.Err(), "node tokens")
}

// RevokeNodeToken implements NodeTokens.
func (s *SQL) RevokeNodeToken(ctx context.Context, id string) (*NodeToken, error) {
	if _, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE node_tokens SET revoked_at = ? WHERE id = ? AND revoked_at = 0`), nowNanos(), id); err != nil {
		return nil, classify(err, fmt.Sprintf("node token %q", id))
	}
	return s.GetNodeToken(ctx, id)
}

// TouchNodeToken implements NodeTokens.
func (s *SQL) TouchNodeToken(ctx context.Context, id string, at time.Time) error {
	_, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE node_tokens SET last_used_at = ? WHERE id = ? AND last_used_at < ?`), toNanos(at), id, toNanos(at))
	return classify(err, fmt.Sprintf("node token %q", id))
}
