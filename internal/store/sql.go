package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"modernc.org/sqlite"               // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// dialect holds what differs between SQLite and Postgres.
type dialect struct {
	name      string
	forUpdate string
}

// rebind turns the ? placeholders of q into $1, $2, ... for Postgres.
func (d dialect) rebind(q string) string {
	if d.name != "postgres" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

var (
	sqliteDialect   = dialect{name: "sqlite"}
	postgresDialect = dialect{name: "postgres", forUpdate: " FOR UPDATE"}
)

// SQL is the Store over database/sql, for SQLite and Postgres.
type SQL struct {
	db    *sql.DB
	d     dialect
	log   *slog.Logger
	watch watchers // WatchSandboxes's subscribers (watch.go)
}

var _ Store = (*SQL)(nil)

// Open opens the store named by dsn: a postgres:// or postgresql:// URL
// opens Postgres, anything else is the path of a SQLite database file.
func Open(ctx context.Context, dsn string, log *slog.Logger) (*SQL, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return OpenPostgres(ctx, dsn, log)
	}
	return OpenSQLite(ctx, dsn, log)
}

// OpenSQLite opens (creating it if needed) the SQLite database at path and
// brings its schema up to date. The database runs in WAL mode so that a
// second process (warren keys) can use it while the server runs, with
// synchronous=FULL: every commit syncs the WAL before it returns, so a
// write the API has acknowledged survives a power loss or a crash of the
// host, as a Postgres commit does (NORMAL would only survive a crash of
// the process; the sync costs about 0.5 ms a commit on the development
// VM, docs/BENCHMARKS.md).
func OpenSQLite(ctx context.Context, path string, log *slog.Logger) (*SQL, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store %q: %w", path, err)
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store %q: %w", path, err)
	}
	// One writer at a time is all SQLite allows; one connection also makes
	// UpdateSandbox's read-modify-write serial within this process.
	db.SetMaxOpenConns(1)
	return open(ctx, db, sqliteDialect, log)
}

// OpenPostgres connects to the Postgres server at dsn and brings its schema
// up to date.
func OpenPostgres(ctx context.Context, dsn string, log *slog.Logger) (*SQL, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("store postgres: %w", err)
	}
	db.SetMaxOpenConns(16)
	return open(ctx, db, postgresDialect, log)
}

func open(ctx context.Context, db *sql.DB, d dialect, log *slog.Logger) (*SQL, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w: %w", d.name, errdefs.ErrUnavailable, err)
	}
	if err := migrate(ctx, db, d); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", d.name, err)
	}
	return &SQL{db: db, d: d, log: log}, nil
}

// Dialect returns "sqlite" or "postgres".
func (s *SQL) Dialect() string { return s.d.name }

// Close implements Store.
func (s *SQL) Close() error { return s.db.Close() }

func nowNanos() int64 { return time.Now().UnixNano() }

func toNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// classify maps driver errors onto errdefs classes.
func classify(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	if violated(err) == uniqueViolation {
		return errdefs.Publicf(errdefs.ErrAlreadyExists, "%s", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// violation is a constraint a statement broke.
type violation int

const (
	noViolation violation = iota
	uniqueViolation
	foreignKeyViolation
)

// violated reads the constraint err broke from the SQL driver's typed
// error: SQLite's extended result code, Postgres's SQLSTATE.
func violated(err error) violation {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return uniqueViolation
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return foreignKeyViolation
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "23505": // unique_violation
			return uniqueViolation
		case "23503": // foreign_key_violation
			return foreignKeyViolation
		}
	}
	return noViolation
}

// CreateAPIKey implements Store.
func (s *SQL) CreateAPIKey(ctx context.Context, k *APIKey) error {
	if k.CreatedAt.IsZero() {
		k.CreatedAt = time.Now().UTC()
	}
	_, err := s.db.ExecContext(ctx, s.d.rebind(`INSERT INTO api_keys (id, team_id, name, hash, mask, created_at) VALUES (?, ?, ?, ?, ?, ?)`),
		k.ID, k.TeamID, k.Name, k.Hash, k.Mask, toNanos(k.CreatedAt))
	if violated(err) == foreignKeyViolation {
		return fmt.Errorf("api key %q: team %q: %w", k.ID, k.TeamID, errdefs.ErrNotFound)
	}
	return classify(err, fmt.Sprintf("api key %q", k.ID))
}

const keyCols = `id, team_id, name, hash, mask, created_at`

func scanKey(sc interface{ Scan(...any) error }) (*APIKey, error) {
	var k APIKey
	var created int64
	if err := sc.Scan(&k.ID, &k.TeamID, &k.Name, &k.Hash, &k.Mask, &created); err != nil {
		return nil, err
	}
	k.CreatedAt = fromNanos(created)
	return &k, nil
}

// APIKeyByHash implements Store.
func (s *SQL) APIKeyByHash(ctx context.Context, hash string) (*APIKey, error) {
	k, err := scanKey(s.db.QueryRowContext(ctx, s.d.rebind(`SELECT `+keyCols+` FROM api_keys WHERE hash = ?`), hash))
	return k, classify(err, "api key")
}

// ListAPIKeys implements Store.
func (s *SQL) ListAPIKeys(ctx context.Context, teamID string) ([]*APIKey, error) {
	q, args := `SELECT `+keyCols+` FROM api_keys ORDER BY created_at, id`, []any{}
	if teamID != "" {
		q, args = `SELECT `+keyCols+` FROM api_keys WHERE team_id = ? ORDER BY created_at, id`, []any{teamID}
	}
	rows, err := s.db.QueryContext(ctx, s.d.rebind(q), args...)
	if err != nil {
		return nil, classify(err, "api keys")
	}
	defer rows.Close()
	var out []*APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, classify(err, "api keys")
		}
		out = append(out, k)
	}
	return out, classify(rows.Err(), "api keys")
}

// DeleteAPIKey implements Store.
func (s *SQL) DeleteAPIKey(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, s.d.rebind(`DELETE FROM api_keys WHERE id = ?`), id)
	if err != nil {
		return classify(err, fmt.Sprintf("api key %q", id))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("api key %q: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

const sandboxCols = `id, team_id, template_id, state, epoch, started_at, end_at, created_at, updated_at, killed_at, kill_reason, spec, node_id`

func scanSandbox(sc interface{ Scan(...any) error }) (*Sandbox, error) {
	var sb Sandbox
	var started, end, created, updated, killed int64
	var state, reason string
	var spec []byte
	var nodeID string
	if err := sc.Scan(&sb.ID, &sb.TeamID, &sb.TemplateID, &state, &sb.Epoch, &started, &end, &created, &updated, &killed, &reason, &spec, &nodeID); err != nil {
		return nil, err
	}
	sb.State, sb.KillReason = sandbox.State(state), sandbox.KillReason(reason)
	sb.StartedAt, sb.EndAt, sb.CreatedAt = fromNanos(started), fromNanos(end), fromNanos(created)
	sb.UpdatedAt, sb.KilledAt = fromNanos(updated), fromNanos(killed)
	if err := json.Unmarshal(spec, &sb.Spec); err != nil {
		return nil, fmt.Errorf("sandbox %q: decode spec: %w", sb.ID, err)
	}
	if nodeID != "" {
		// The column is the truth (a placement sets it); rows of version
		// 3 have the node only in their spec.
		sb.Spec.NodeID = nodeID
	}
	return &sb, nil
}

func validate(sb *Sandbox) error {
	if !sandbox.ValidID(sb.ID) {
		return fmt.Errorf("sandbox %q: id: %w", sb.ID, errdefs.ErrInvalid)
	}
	if !sb.State.Valid() {
		return fmt.Errorf("sandbox %q: state %q: %w", sb.ID, sb.State, errdefs.ErrInvalid)
	}
	return nil
}

// CreateSandbox implements Store.
func (s *SQL) CreateSandbox(ctx context.Context, sb *Sandbox) error {
	return s.insertSandbox(ctx, s.db, sb)
}

// insertSandbox adds a sandbox row through db.
func (s *SQL) insertSandbox(ctx context.Context, db execer, sb *Sandbox) error {
	if err := validate(sb); err != nil {
		return err
	}
	now := time.Now().UTC()
	if sb.CreatedAt.IsZero() {
		sb.CreatedAt = now
	}
	sb.UpdatedAt = now
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return fmt.Errorf("sandbox %q: encode spec: %w", sb.ID, err)
	}
	_, err = db.ExecContext(ctx, s.d.rebind(`INSERT INTO sandboxes (`+sandboxCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		sb.ID, sb.TeamID, sb.TemplateID, string(sb.State), sb.Epoch, toNanos(sb.StartedAt), toNanos(sb.EndAt),
		toNanos(sb.CreatedAt), toNanos(sb.UpdatedAt), toNanos(sb.KilledAt), string(sb.KillReason), string(spec), sb.Spec.NodeID)
	return classify(err, fmt.Sprintf("sandbox %q", sb.ID))
}

// GetSandbox implements Store.
func (s *SQL) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	sb, err := scanSandbox(s.db.QueryRowContext(ctx, s.d.rebind(`SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`), id))
	return sb, classify(err, fmt.Sprintf("sandbox %q", id))
}

// UpdateSandbox implements Store.
func (s *SQL) UpdateSandbox(ctx context.Context, id string, fn func(*Sandbox) error) (*Sandbox, error) {
	return s.TransitionSandbox(ctx, id, func(sb *Sandbox) (*Event, error) { return nil, fn(sb) })
}

// TransitionSandbox implements Store.
func (s *SQL) TransitionSandbox(ctx context.Context, id string, fn func(*Sandbox) (*Event, error)) (*Sandbox, error) {
	what := fmt.Sprintf("sandbox %q", id)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	sb, err := scanSandbox(tx.QueryRowContext(ctx, s.d.rebind(`SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`+s.d.forUpdate), id))
	if err != nil {
		return nil, classify(err, what)
	}
	ev, err := fn(sb)
	if err != nil {
		return nil, err
	}
	if sb.ID != id {
		return nil, fmt.Errorf("%s: id changed: %w", what, errdefs.ErrInvalid)
	}
	if err := validate(sb); err != nil {
		return nil, err
	}
	sb.UpdatedAt = time.Now().UTC()
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return nil, fmt.Errorf("%s: encode spec: %w", what, err)
	}
	_, err = tx.ExecContext(ctx, s.d.rebind(`UPDATE sandboxes SET team_id = ?, template_id = ?, state = ?, epoch = ?, started_at = ?, end_at = ?, updated_at = ?, killed_at = ?, kill_reason = ?, spec = ?, node_id = ? WHERE id = ?`),
		sb.TeamID, sb.TemplateID, string(sb.State), sb.Epoch, toNanos(sb.StartedAt), toNanos(sb.EndAt),
		toNanos(sb.UpdatedAt), toNanos(sb.KilledAt), string(sb.KillReason), string(spec), sb.Spec.NodeID, id)
	if err != nil {
		return nil, classify(err, what)
	}
	if ev != nil {
		if err := s.appendEventTx(ctx, tx, ev); err != nil {
			return nil, err
		}
	}
	if err := s.notifyTx(ctx, tx, id); err != nil {
		return nil, classify(err, what)
	}
	if err := tx.Commit(); err != nil {
		return nil, classify(err, what)
	}
	s.watch.notify(id)
	return sb, nil
}

// ListSandboxes implements Store.
func (s *SQL) ListSandboxes(ctx context.Context, f SandboxFilter) ([]*Sandbox, error) {
	var where []string
	var args []any
	if f.TeamID != "" {
		where, args = append(where, "team_id = ?"), append(args, f.TeamID)
	}
	states := f.States
	if len(states) == 0 {
		states = LiveStates
	}
	ph := make([]string, len(states))
	for i, st := range states {
		ph[i] = "?"
		args = append(args, string(st))
	}
	where = append(where, "state IN ("+strings.Join(ph, ", ")+")")
	if f.TemplateID != "" {
		where, args = append(where, "template_id = ?"), append(args, f.TemplateID)
	}
	if f.NodeID != "" {
		where, args = append(where, "node_id = ?"), append(args, f.NodeID)
	}
	if !f.StartedAfter.IsZero() {
		where, args = append(where, "started_at >= ?"), append(args, toNanos(f.StartedAfter))
	}
	q := `SELECT ` + sandboxCols + ` FROM sandboxes WHERE ` + strings.Join(where, " AND ") + ` ORDER BY started_at, id`
	rows, err := s.db.QueryContext(ctx, s.d.rebind(q), args...)
	if err != nil {
		return nil, classify(err, "sandboxes")
	}
	defer rows.Close()
	var out []*Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, classify(err, "sandboxes")
		}
		out = append(out, sb)
	}
	return out, classify(rows.Err(), "sandboxes")
}

// CountSandboxes implements Store.
func (s *SQL) CountSandboxes(ctx context.Context, teamID string, states ...sandbox.State) (int, error) {
	return s.countSandboxes(ctx, s.db, teamID, states...)
}

func (s *SQL) countSandboxes(ctx context.Context, db execer, teamID string, states ...sandbox.State) (int, error) {
	if len(states) == 0 {
		states = LiveStates
	}
	args := []any{teamID}
	ph := make([]string, len(states))
	for i, st := range states {
		ph[i] = "?"
		args = append(args, string(st))
	}
	var n int
	err := db.QueryRowContext(ctx, s.d.rebind(`SELECT COUNT(*) FROM sandboxes WHERE team_id = ? AND state IN (`+strings.Join(ph, ", ")+`)`), args...).Scan(&n)
	return n, classify(err, fmt.Sprintf("team %q sandboxes", teamID))
}

// CreateSandboxWithin implements Store.
func (s *SQL) CreateSandboxWithin(ctx context.Context, sb *Sandbox, limit int, states ...sandbox.State) error {
	if limit <= 0 {
		return fmt.Errorf("team %q has a limit of %d sandboxes: %w", sb.TeamID, limit, errdefs.ErrExhausted)
	}
	return s.insertWithin(ctx, sb, nil, limit, false, states...)
}

// RecordSandbox implements Store. Its row is a change WatchSandboxes
// tells of, as an update's is.
func (s *SQL) RecordSandbox(ctx context.Context, sb *Sandbox, ev *Event, limit int, states ...sandbox.State) error {
	return s.insertWithin(ctx, sb, ev, limit, true, states...)
}

// insertWithin inserts sb and its event ev (nil for none) in one
// transaction, unless the team has limit (when positive) or more
// sandboxes in states; notify tells WatchSandboxes's watchers.
func (s *SQL) insertWithin(ctx context.Context, sb *Sandbox, ev *Event, limit int, notify bool, states ...sandbox.State) error {
	what := fmt.Sprintf("sandbox %q", sb.ID)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	// Creates of one team are serialized across every process sharing the
	// database: on Postgres by a transaction-scoped advisory lock on the
	// team; SQLite's transactions take its write lock at BEGIN.
	if s.d.name == "postgres" {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('warren-team:' || $1))`, sb.TeamID); err != nil {
			return classify(err, what)
		}
	}
	if limit > 0 {
		n, err := s.countSandboxes(ctx, tx, sb.TeamID, states...)
		if err != nil {
			return err
		}
		if n >= limit {
			return fmt.Errorf("team %q has %d of %d sandboxes: %w", sb.TeamID, n, limit, errdefs.ErrExhausted)
		}
	}
	if err := s.insertSandbox(ctx, tx, sb); err != nil {
		return err
	}
	if ev != nil {
		if err := s.appendEventTx(ctx, tx, ev); err != nil {
			return err
		}
	}
	if !notify {
		return classify(tx.Commit(), what)
	}
	if err := s.notifyTx(ctx, tx, sb.ID); err != nil {
		return classify(err, what)
	}
	if err := tx.Commit(); err != nil {
		return classify(err, what)
	}
	s.watch.notify(sb.ID)
	return nil
}

// DeleteSandbox implements Store.
func (s *SQL) DeleteSandbox(ctx context.Context, id string) error {
	what := fmt.Sprintf("sandbox %q", id)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM sandboxes WHERE id = ?`), id)
	if err != nil {
		return classify(err, what)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM events WHERE sandbox_id = ?)`), id); err != nil {
		return classify(err, what)
	}
	if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM events WHERE sandbox_id = ?`), id); err != nil {
		return classify(err, what)
	}
	if err := s.notifyTx(ctx, tx, id); err != nil {
		return classify(err, what)
	}
	if err := tx.Commit(); err != nil {
		return classify(err, what)
	}
	s.watch.notify(id)
	return nil
}
