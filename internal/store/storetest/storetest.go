// Package storetest opens real stores for tests: a SQLite file in a
// temporary directory, or a fresh schema on the Postgres server named by
// $WARREN_TEST_POSTGRES_DSN.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// SQLite opens a new SQLite store in t's temporary directory.
func SQLite(t testing.TB) *store.SQL {
	t.Helper()
	s, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "warren.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// PostgresDSN returns $WARREN_TEST_POSTGRES_DSN, skipping the test when it
// is unset (failing instead under CI=true).
func PostgresDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("WARREN_TEST_POSTGRES_DSN")
	testenv.Require(t, dsn != "", "WARREN_TEST_POSTGRES_DSN is not set; run: eval \"$(scripts/start-postgres.sh var/pgdata 55432)\" (scripts/test.sh starts a server)")
	return dsn
}

// Processes maps each database kind to a function that opens two stores
// on one new database, as two processes sharing it would (SQLite's is one
// store twice: one process owns the file).
func Processes() map[string]func(*testing.T) (a, b *store.SQL) {
	return map[string]func(*testing.T) (a, b *store.SQL){
		"sqlite": func(t *testing.T) (a, b *store.SQL) { s := SQLite(t); return s, s },
		"postgres": func(t *testing.T) (a, b *store.SQL) {
			dsn := PostgresSchema(t)
			return OpenPostgres(t, dsn), OpenPostgres(t, dsn)
		},
	}
}

// PostgresAvailable reports whether a test server is configured
// (benchmarks run without one).
func PostgresAvailable() bool { return os.Getenv("WARREN_TEST_POSTGRES_DSN") != "" }

// Postgres opens a store on a new, empty schema of the test server; the
// schema is dropped when the test ends.
func Postgres(t testing.TB) *store.SQL {
	t.Helper()
	return OpenPostgres(t, PostgresSchema(t))
}

// OpenPostgres opens a store on dsn, closed when the test ends; two
// opens of one PostgresSchema are two processes sharing a database.
func OpenPostgres(t testing.TB, dsn string) *store.SQL {
	t.Helper()
	s, err := store.OpenPostgres(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(fmt.Errorf("open postgres: %w", err))
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// PostgresSchema makes a new, empty schema on the test server and returns
// a DSN that uses it; the schema is dropped when the test ends.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	dsn := PostgresDSN(t)
	ctx := context.Background()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := "t_" + sandbox.RandomToken(6)
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
