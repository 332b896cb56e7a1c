package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// VolumeState is where a volume is in its life:
//
//	creating ──(its node made it)──▶ ready ──DELETE──▶ deleting ──(its node deleted it)──▶ (no row)
//	creating ──(the create failed, or was cut short)──────────────────────────────────────▶ (no row)
//
// Only a ready volume is listed, read and mounted; a row in another state
// keeps its name and its share of the team's quota until it goes
// (internal/volumes finishes what a crash left half done).
type VolumeState string

// Volume states.
const (
	VolumeCreating VolumeState = "creating"
	VolumeReady    VolumeState = "ready"
	VolumeDeleting VolumeState = "deleting"
)

// Volume is the control plane's record of one volume: a file system of
// SizeMB on the disk of node NodeID.
type Volume struct {
	ID     string
	TeamID string
	Name   string // unique within the team
	NodeID string
	SizeMB int64
	State  VolumeState
	// Token authenticates the volume's content API (E2B's volume token);
	// kept as the sandboxes' envd tokens are, since E2B's getInfo hands it
	// out again.
	Token     string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// VolumeQuota bounds a team's volumes when one is added: their number
// and the sum of their sizes (a zero field bounds nothing).
type VolumeQuota struct {
	MaxVolumes   int
	MaxStorageMB int64
}

// VolumeFilter selects volumes; empty fields match every volume.
type VolumeFilter struct {
	TeamID string
	NodeID string
	States []VolumeState
}

// VolumeStore is the volumes' part of the store; *SQL implements it.
// Errors carry the errdefs classes: ErrNotFound for a missing row,
// ErrAlreadyExists for a name the team has, ErrExhausted for a quota.
type VolumeStore interface {
	// CreateVolume adds v unless the team has a volume named v.Name (in
	// any state) or would go over q, counted with every volume row of
	// the team; the count and the insert are one transaction serialized
	// per team across processes.
	CreateVolume(ctx context.Context, v *Volume, q VolumeQuota) error
	// GetVolume returns a volume by ID, in any state.
	GetVolume(ctx context.Context, id string) (*Volume, error)
	// GetVolumeByName returns team teamID's volume named name.
	GetVolumeByName(ctx context.Context, teamID, name string) (*Volume, error)
	// ListVolumes returns the volumes matching f, oldest first.
	ListVolumes(ctx context.Context, f VolumeFilter) ([]*Volume, error)
	// UpdateVolume reads the volume, lets fn change its state or node and
	// writes it back in one transaction; an error of fn writes nothing.
	UpdateVolume(ctx context.Context, id string, fn func(*Volume) error) (*Volume, error)
	// DeleteVolume removes a volume's row.
	DeleteVolume(ctx context.Context, id string) error
}

var _ VolumeStore = (*SQL)(nil)

const volumeCols = `id, team_id, name, node_id, size_mb, state, token, created_at, updated_at`

func scanVolume(sc interface{ Scan(...any) error }) (*Volume, error) {
	var v Volume
	var created, updated int64
	var state string
	if err := sc.Scan(&v.ID, &v.TeamID, &v.Name, &v.NodeID, &v.SizeMB, &state, &v.Token, &created, &updated); err != nil {
		return nil, err
	}
	v.State, v.CreatedAt, v.UpdatedAt = VolumeState(state), fromNanos(created), fromNanos(updated)
	return &v, nil
}

// CreateVolume implements VolumeStore.
func (s *SQL) CreateVolume(ctx context.Context, v *Volume, q VolumeQuota) error {
	what := fmt.Sprintf("volume %q", v.ID)
	if v.ID == "" || v.TeamID == "" || v.Name == "" || v.SizeMB <= 0 {
		return fmt.Errorf("%s: id, team, name and a positive size are required: %w", what, errdefs.ErrInvalid)
	}
	if v.State == "" {
		v.State = VolumeCreating
	}
	now := time.Now().UTC()
	if v.CreatedAt.IsZero() {
		v.CreatedAt = now
	}
	v.UpdatedAt = now
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	if s.d.name == "postgres" {
		// The team's lock (CreateSandboxWithin's, DeleteTeam's): a team
		// being deleted gets no volume, and two creates count in turn.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('warren-team:' || $1))`, v.TeamID); err != nil {
			return classify(err, what)
		}
	}
	var exists int
	if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM teams WHERE id = ?`), v.TeamID).Scan(&exists); err != nil {
		return classify(err, what)
	}
	if exists == 0 {
		return fmt.Errorf("%s: team %q: %w", what, v.TeamID, errdefs.ErrNotFound)
	}
	var n int
	var used int64
	if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*), COALESCE(SUM(size_mb), 0) FROM volumes WHERE team_id = ?`), v.TeamID).Scan(&n, &used); err != nil {
		return classify(err, what)
	}
	if q.MaxVolumes > 0 && n >= q.MaxVolumes {
		return errdefs.Publicf(errdefs.ErrExhausted, "you have reached the maximum number of volumes (%d); destroy a volume or ask for a higher limit", q.MaxVolumes)
	}
	if q.MaxStorageMB > 0 && used+v.SizeMB > q.MaxStorageMB {
		return errdefs.Publicf(errdefs.ErrExhausted, "a volume of %d MiB does not fit the team's volume storage: %d of %d MiB taken; destroy a volume or ask for a higher limit", v.SizeMB, used, q.MaxStorageMB)
	}
	_, err = tx.ExecContext(ctx, s.d.rebind(`INSERT INTO volumes (`+volumeCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		v.ID, v.TeamID, v.Name, v.NodeID, v.SizeMB, string(v.State), v.Token, toNanos(v.CreatedAt), toNanos(v.UpdatedAt))
	if violated(err) == uniqueViolation {
		if _, gerr := s.getVolumeTx(ctx, tx, v.ID); gerr == nil {
			return fmt.Errorf("%s: %w", what, errdefs.ErrAlreadyExists)
		}
		return errdefs.Publicf(errdefs.ErrAlreadyExists, "a volume named %q already exists", v.Name)
	}
	if err != nil {
		return classify(err, what)
	}
	return classify(tx.Commit(), what)
}

func (s *SQL) getVolumeTx(ctx context.Context, db execer, id string) (*Volume, error) {
	v, err := scanVolume(db.QueryRowContext(ctx, s.d.rebind(`SELECT `+volumeCols+` FROM volumes WHERE id = ?`), id))
	return v, classify(err, fmt.Sprintf("volume %q", id))
}

// GetVolume implements VolumeStore.
func (s *SQL) GetVolume(ctx context.Context, id string) (*Volume, error) {
	return s.getVolumeTx(ctx, s.db, id)
}

// GetVolumeByName implements VolumeStore.
func (s *SQL) GetVolumeByName(ctx context.Context, teamID, name string) (*Volume, error) {
	v, err := scanVolume(s.db.QueryRowContext(ctx, s.d.rebind(`SELECT `+volumeCols+` FROM volumes WHERE team_id = ? AND name = ?`), teamID, name))
	return v, classify(err, fmt.Sprintf("volume %q of team %q", name, teamID))
}

// ListVolumes implements VolumeStore.
func (s *SQL) ListVolumes(ctx context.Context, f VolumeFilter) ([]*Volume, error) {
	q := `SELECT ` + volumeCols + ` FROM volumes`
	var where []string
	var args []any
	if f.TeamID != "" {
		where, args = append(where, "team_id = ?"), append(args, f.TeamID)
	}
	if f.NodeID != "" {
		where, args = append(where, "node_id = ?"), append(args, f.NodeID)
	}
	if len(f.States) > 0 {
		marks := make([]string, len(f.States))
		for i, st := range f.States {
			marks[i] = "?"
			args = append(args, string(st))
		}
		where = append(where, "state IN ("+strings.Join(marks, ", ")+")")
	}
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.db.QueryContext(ctx, s.d.rebind(q+" ORDER BY created_at, id"), args...)
	if err != nil {
		return nil, classify(err, "volumes")
	}
	defer rows.Close()
	var out []*Volume
	for rows.Next() {
		v, err := scanVolume(rows)
		if err != nil {
			return nil, classify(err, "volumes")
		}
		out = append(out, v)
	}
	return out, classify(rows.Err(), "volumes")
}

// UpdateVolume implements VolumeStore. The ID, team, name, size, token
// and creation time stay as they are.
func (s *SQL) UpdateVolume(ctx context.Context, id string, fn func(*Volume) error) (*Volume, error) {
	what := fmt.Sprintf("volume %q", id)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify(err, what)
	}
	defer tx.Rollback()
	q := `SELECT ` + volumeCols + ` FROM volumes WHERE id = ?` + s.d.forUpdate
	v, err := scanVolume(tx.QueryRowContext(ctx, s.d.rebind(q), id))
	if err != nil {
		return nil, classify(err, what)
	}
	fixed := *v
	if err := fn(v); err != nil {
		return nil, err
	}
	v.ID, v.TeamID, v.Name, v.SizeMB, v.Token, v.CreatedAt = fixed.ID, fixed.TeamID, fixed.Name, fixed.SizeMB, fixed.Token, fixed.CreatedAt
	v.UpdatedAt = time.Now().UTC()
	if _, err := tx.ExecContext(ctx, s.d.rebind(`UPDATE volumes SET node_id = ?, state = ?, updated_at = ? WHERE id = ?`),
		v.NodeID, string(v.State), toNanos(v.UpdatedAt), id); err != nil {
		return nil, classify(err, what)
	}
	return v, classify(tx.Commit(), what)
}

// DeleteVolume implements VolumeStore.
func (s *SQL) DeleteVolume(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, s.d.rebind(`DELETE FROM volumes WHERE id = ?`), id)
	if err != nil {
		return classify(err, fmt.Sprintf("volume %q", id))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("volume %q: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// countVolumes counts team teamID's volume rows, in any state.
func (s *SQL) countVolumes(ctx context.Context, db execer, teamID string) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM volumes WHERE team_id = ?`), teamID).Scan(&n); err != nil {
		return 0, classify(err, fmt.Sprintf("volumes of team %q", teamID))
	}
	return n, nil
}
