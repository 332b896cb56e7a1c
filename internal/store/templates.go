package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// TemplateStore is the template catalog's store (templates.Store) in the
// control plane's database (migration 6), so that every replica of
// `warren api` sharing the database sees one catalog. Templates and
// builds are JSON documents beside the columns they are looked up by;
// writes of templates (whose aliases must stay unique per team) are
// serialized across processes, on Postgres by a transaction-scoped
// advisory lock, on SQLite by its write lock taken at BEGIN.
type TemplateStore struct{ s *SQL }

var _ templates.Store = (*TemplateStore)(nil)

// Templates returns the template catalog's store over s.
func (s *SQL) Templates() *TemplateStore { return &TemplateStore{s: s} }

// lock takes the transaction-scoped advisory lock called name on
// Postgres; SQLite's write transactions already exclude each other.
func (t *TemplateStore) lock(ctx context.Context, tx *sql.Tx, name string) error {
	if t.s.d.name != "postgres" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, name)
	return err
}

// lockCatalog serializes the writes that check and change aliases.
func (t *TemplateStore) lockCatalog(ctx context.Context, tx *sql.Tx) error {
	return t.lock(ctx, tx, "warren-templates")
}

// CreateTemplate implements templates.Store.
func (t *TemplateStore) CreateTemplate(ctx context.Context, tm *templates.Template) error {
	if err := templates.CheckID("template", tm.ID); err != nil {
		return err
	}
	what := fmt.Sprintf("template %q", tm.ID)
	doc, err := json.Marshal(tm)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	tx, err := t.s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback() // after Commit it is a no-op
	if err := t.lockCatalog(ctx, tx); err != nil {
		return classify(err, what)
	}
	if err := t.checkAliases(ctx, tx, tm.ID, tm.Aliases); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, t.s.d.rebind(`INSERT INTO templates (id, team_id, created_at, doc) VALUES (?, ?, ?, ?)`),
		tm.ID, tm.TeamID, toNanos(tm.CreatedAt), string(doc)); err != nil {
		return classify(err, what)
	}
	if err := t.insertAliases(ctx, tx, tm); err != nil {
		return err
	}
	return classify(tx.Commit(), what)
}

// checkAliases refuses aliases that are another template's ID (the alias
// rows refuse one another team member's template has).
func (t *TemplateStore) checkAliases(ctx context.Context, tx *sql.Tx, id string, aliases []string) error {
	for _, a := range aliases {
		if a == id {
			continue
		}
		var n int
		if err := tx.QueryRowContext(ctx, t.s.d.rebind(`SELECT COUNT(*) FROM templates WHERE id = ?`), a).Scan(&n); err != nil {
			return classify(err, fmt.Sprintf("template alias %q", a))
		}
		if n > 0 {
			return errdefs.Publicf(errdefs.ErrAlreadyExists, "template alias %q", a)
		}
	}
	return nil
}

func (t *TemplateStore) insertAliases(ctx context.Context, tx *sql.Tx, tm *templates.Template) error {
	for _, a := range tm.Aliases {
		if _, err := tx.ExecContext(ctx, t.s.d.rebind(`INSERT INTO template_aliases (team_id, alias, template_id) VALUES (?, ?, ?)`),
			tm.TeamID, a, tm.ID); err != nil {
			return classify(err, fmt.Sprintf("template alias %q", a))
		}
	}
	return nil
}

func scanTemplate(sc interface{ Scan(...any) error }, what string) (*templates.Template, error) {
	var doc string
	if err := sc.Scan(&doc); err != nil {
		return nil, classify(err, what)
	}
	tm := new(templates.Template)
	if err := json.Unmarshal([]byte(doc), tm); err != nil {
		return nil, fmt.Errorf("%s: decode: %w", what, err)
	}
	return tm, nil
}

// UpdateTemplate implements templates.Store.
func (t *TemplateStore) UpdateTemplate(ctx context.Context, id string, fn func(*templates.Template) error) (*templates.Template, error) {
	what := fmt.Sprintf("template %q", id)
	if templates.CheckID("template", id) != nil {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	tx, err := t.s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify(err, what)
	}
	defer tx.Rollback()
	if err := t.lockCatalog(ctx, tx); err != nil {
		return nil, classify(err, what)
	}
	tm, err := t.updateTemplateTx(ctx, tx, id, fn)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, classify(err, what)
	}
	return tm, nil
}

// updateTemplateTx is UpdateTemplate's change, in tx, which holds the
// catalog's lock.
func (t *TemplateStore) updateTemplateTx(ctx context.Context, tx *sql.Tx, id string, fn func(*templates.Template) error) (*templates.Template, error) {
	what := fmt.Sprintf("template %q", id)
	tm, err := scanTemplate(tx.QueryRowContext(ctx, t.s.d.rebind(`SELECT doc FROM templates WHERE id = ?`+t.s.d.forUpdate), id), what)
	if err != nil {
		return nil, err
	}
	if err := fn(tm); err != nil {
		return nil, err
	}
	tm.ID = id
	doc, err := json.Marshal(tm)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := t.checkAliases(ctx, tx, id, tm.Aliases); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, t.s.d.rebind(`DELETE FROM template_aliases WHERE template_id = ?`), id); err != nil {
		return nil, classify(err, what)
	}
	if err := t.insertAliases(ctx, tx, tm); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, t.s.d.rebind(`UPDATE templates SET team_id = ?, doc = ? WHERE id = ?`), tm.TeamID, string(doc), id); err != nil {
		return nil, classify(err, what)
	}
	return tm, nil
}

// GetTemplate implements templates.Store.
func (t *TemplateStore) GetTemplate(ctx context.Context, id string) (*templates.Template, error) {
	what := fmt.Sprintf("template %q", id)
	if templates.CheckID("template", id) != nil {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	return scanTemplate(t.s.db.QueryRowContext(ctx, t.s.d.rebind(`SELECT doc FROM templates WHERE id = ?`), id), what)
}

// TemplateByAlias implements templates.Store.
func (t *TemplateStore) TemplateByAlias(ctx context.Context, teamID, alias string) (*templates.Template, error) {
	return scanTemplate(t.s.db.QueryRowContext(ctx, t.s.d.rebind(`SELECT t.doc FROM template_aliases a JOIN templates t ON t.id = a.template_id
WHERE a.team_id = ? AND a.alias = ?`), teamID, alias), fmt.Sprintf("template alias %q", alias))
}

// ListTemplates implements templates.Store.
func (t *TemplateStore) ListTemplates(ctx context.Context) ([]*templates.Template, error) {
	rows, err := t.s.db.QueryContext(ctx, `SELECT doc FROM templates ORDER BY created_at, id`)
	if err != nil {
		return nil, classify(err, "templates")
	}
	defer rows.Close()
	out := []*templates.Template{}
	for rows.Next() {
		tm, err := scanTemplate(rows, "templates")
		if err != nil {
			return nil, err
		}
		out = append(out, tm)
	}
	return out, classify(rows.Err(), "templates")
}

// DeleteTemplate implements templates.Store.
func (t *TemplateStore) DeleteTemplate(ctx context.Context, id string) error {
	what := fmt.Sprintf("template %q", id)
	if templates.CheckID("template", id) != nil {
		return errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	tx, err := t.s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback()
	if err := t.lockCatalog(ctx, tx); err != nil {
		return classify(err, what)
	}
	res, err := tx.ExecContext(ctx, t.s.d.rebind(`DELETE FROM templates WHERE id = ?`), id)
	if err != nil {
		return classify(err, what)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	for _, q := range []string{
		`DELETE FROM template_aliases WHERE template_id = ?`,
		`DELETE FROM template_build_logs WHERE build_id IN (SELECT id FROM template_builds WHERE template_id = ?)`,
		`DELETE FROM template_builds WHERE template_id = ?`,
	} {
		if _, err := tx.ExecContext(ctx, t.s.d.rebind(q), id); err != nil {
			return classify(err, what)
		}
	}
	return classify(tx.Commit(), what)
}

// CreateBuild implements templates.Store.
func (t *TemplateStore) CreateBuild(ctx context.Context, b *templates.Build) error {
	if err := templates.CheckID("build", b.ID); err != nil {
		return err
	}
	what := fmt.Sprintf("build %q", b.ID)
	doc, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	_, err = t.s.db.ExecContext(ctx, t.s.d.rebind(`INSERT INTO template_builds (id, template_id, created_at, doc) VALUES (?, ?, ?, ?)`),
		b.ID, b.TemplateID, toNanos(b.CreatedAt), string(doc))
	return classify(err, what)
}

func scanBuild(sc interface{ Scan(...any) error }, what string) (*templates.Build, error) {
	var doc string
	if err := sc.Scan(&doc); err != nil {
		return nil, classify(err, what)
	}
	b := new(templates.Build)
	if err := json.Unmarshal([]byte(doc), b); err != nil {
		return nil, fmt.Errorf("%s: decode: %w", what, err)
	}
	return b, nil
}

// UpdateBuild implements templates.Store.
func (t *TemplateStore) UpdateBuild(ctx context.Context, id string, fn func(*templates.Build) error) (*templates.Build, error) {
	return t.finishBuild(ctx, id, fn, nil)
}

// FinishBuild implements templates.Store: both rows change in one
// transaction, under the catalog's lock that every template change takes.
func (t *TemplateStore) FinishBuild(ctx context.Context, id string, fnBuild func(*templates.Build) error, fnTemplate func(*templates.Template) error) (*templates.Build, error) {
	return t.finishBuild(ctx, id, fnBuild, fnTemplate)
}

// finishBuild changes the build, and its template when fnTemplate is set,
// in one transaction.
func (t *TemplateStore) finishBuild(ctx context.Context, id string, fn func(*templates.Build) error, fnTemplate func(*templates.Template) error) (*templates.Build, error) {
	what := fmt.Sprintf("build %q", id)
	if templates.CheckID("build", id) != nil {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	tx, err := t.s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, classify(err, what)
	}
	defer tx.Rollback()
	if fnTemplate != nil {
		if err := t.lockCatalog(ctx, tx); err != nil {
			return nil, classify(err, what)
		}
	}
	b, err := scanBuild(tx.QueryRowContext(ctx, t.s.d.rebind(`SELECT doc FROM template_builds WHERE id = ?`+t.s.d.forUpdate), id), what)
	if err != nil {
		return nil, err
	}
	if err := fn(b); err != nil {
		return nil, err
	}
	b.ID = id
	doc, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if _, err := tx.ExecContext(ctx, t.s.d.rebind(`UPDATE template_builds SET template_id = ?, doc = ? WHERE id = ?`), b.TemplateID, string(doc), id); err != nil {
		return nil, classify(err, what)
	}
	if fnTemplate != nil {
		if _, err := t.updateTemplateTx(ctx, tx, b.TemplateID, fnTemplate); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, classify(err, what)
	}
	return b, nil
}

// GetBuild implements templates.Store.
func (t *TemplateStore) GetBuild(ctx context.Context, id string) (*templates.Build, error) {
	what := fmt.Sprintf("build %q", id)
	if templates.CheckID("build", id) != nil {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "%s", what)
	}
	return scanBuild(t.s.db.QueryRowContext(ctx, t.s.d.rebind(`SELECT doc FROM template_builds WHERE id = ?`), id), what)
}

// ListBuilds implements templates.Store.
func (t *TemplateStore) ListBuilds(ctx context.Context, templateID string) ([]*templates.Build, error) {
	what := fmt.Sprintf("template %q builds", templateID)
	rows, err := t.s.db.QueryContext(ctx, t.s.d.rebind(`SELECT doc FROM template_builds WHERE template_id = ? ORDER BY created_at, id`), templateID)
	if err != nil {
		return nil, classify(err, what)
	}
	defer rows.Close()
	var out []*templates.Build
	for rows.Next() {
		b, err := scanBuild(rows, what)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, classify(rows.Err(), what)
}

// AppendLogs implements templates.Store. Appends to one build are
// serialized (an advisory lock per build on Postgres), so a line's seq is
// also the order of commits: a reader polling from an offset never skips
// a line another writer committed late.
func (t *TemplateStore) AppendLogs(ctx context.Context, buildID string, entries ...templates.LogEntry) error {
	if len(entries) == 0 {
		return nil
	}
	what := fmt.Sprintf("build %q log", buildID)
	if err := templates.CheckID("build", buildID); err != nil {
		return err
	}
	tx, err := t.s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err, what)
	}
	defer tx.Rollback()
	if err := t.lock(ctx, tx, "warren-build-log:"+buildID); err != nil {
		return classify(err, what)
	}
	var last int64
	if err := tx.QueryRowContext(ctx, t.s.d.rebind(`SELECT COALESCE(MAX(seq), 0) FROM template_build_logs WHERE build_id = ?`), buildID).Scan(&last); err != nil {
		return classify(err, what)
	}
	if err := t.insertLogs(ctx, tx, buildID, last, entries); err != nil {
		return err
	}
	return classify(tx.Commit(), what)
}

// AppendLogsAt appends entries to a build's log if it has offset entries,
// and returns how many it has then: several copiers of one log (the
// replicas following a build on its node) each append a batch at most
// once, whoever comes first.
func (t *TemplateStore) AppendLogsAt(ctx context.Context, buildID string, offset int, entries ...templates.LogEntry) (int, error) {
	what := fmt.Sprintf("build %q log", buildID)
	if err := templates.CheckID("build", buildID); err != nil {
		return 0, err
	}
	tx, err := t.s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, classify(err, what)
	}
	defer tx.Rollback()
	if err := t.lock(ctx, tx, "warren-build-log:"+buildID); err != nil {
		return 0, classify(err, what)
	}
	var last int64
	if err := tx.QueryRowContext(ctx, t.s.d.rebind(`SELECT COALESCE(MAX(seq), 0) FROM template_build_logs WHERE build_id = ?`), buildID).Scan(&last); err != nil {
		return 0, classify(err, what)
	}
	if int(last) != offset || len(entries) == 0 {
		return int(last), nil
	}
	if err := t.insertLogs(ctx, tx, buildID, last, entries); err != nil {
		return 0, err
	}
	return int(last) + len(entries), classify(tx.Commit(), what)
}

func (t *TemplateStore) insertLogs(ctx context.Context, tx *sql.Tx, buildID string, last int64, entries []templates.LogEntry) error {
	what := fmt.Sprintf("build %q log", buildID)
	for i, e := range entries {
		line, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if _, err := tx.ExecContext(ctx, t.s.d.rebind(`INSERT INTO template_build_logs (build_id, seq, entry) VALUES (?, ?, ?)`),
			buildID, last+int64(i)+1, string(line)); err != nil {
			return classify(err, what)
		}
	}
	return nil
}

// Logs implements templates.Store.
func (t *TemplateStore) Logs(ctx context.Context, buildID string, offset int) ([]templates.LogEntry, error) {
	what := fmt.Sprintf("build %q log", buildID)
	if templates.CheckID("build", buildID) != nil {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "build %q", buildID)
	}
	rows, err := t.s.db.QueryContext(ctx, t.s.d.rebind(`SELECT entry FROM template_build_logs WHERE build_id = ? AND seq > ? ORDER BY seq`), buildID, max(offset, 0))
	if err != nil {
		return nil, classify(err, what)
	}
	defer rows.Close()
	out := []templates.LogEntry{}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, classify(err, what)
		}
		var e templates.LogEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("%s: decode: %w", what, err)
		}
		out = append(out, e)
	}
	return out, classify(rows.Err(), what)
}
