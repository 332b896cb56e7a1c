package store_test

import (
	"testing"

	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/internal/templates"
	"github.com/warren-sandbox/warren/internal/templates/templatestest"
)

// TestTemplateStoreSQLite runs the template store's conformance suite on
// SQLite (one process).
func TestTemplateStoreSQLite(t *testing.T) {
	t.Parallel()
	templatestest.Run(t, func(t *testing.T) (a, b templates.Store) {
		s := storetest.SQLite(t).Templates()
		return s, s
	})
}

// TestTemplateStorePostgres runs it on Postgres with two opens of one
// database, as two replicas of warren api.
func TestTemplateStorePostgres(t *testing.T) {
	t.Parallel()
	storetest.PostgresDSN(t)
	templatestest.Run(t, func(t *testing.T) (a, b templates.Store) {
		dsn := storetest.PostgresSchema(t)
		return storetest.OpenPostgres(t, dsn).Templates(), storetest.OpenPostgres(t, dsn).Templates()
	})
}
