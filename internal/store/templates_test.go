package store_test

import (
	"context"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/store"

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

// TestAppendLogsAt: a batch goes at its offset only, so several copiers
// of one log append it once.
func TestAppendLogsAt(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]*store.TemplateStore{"sqlite": storetest.SQLite(t).Templates(), "postgres": storetest.Postgres(t).Templates()} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			line := func(m string) templates.LogEntry { return templates.LogEntry{Level: templates.LogInfo, Message: m} }
			for _, c := range []struct {
				offset int
				lines  []string
				want   int
			}{{0, []string{"a", "b"}, 2}, {0, []string{"a", "b"}, 2}, {1, []string{"x"}, 2}, {2, []string{"c"}, 3}, {3, nil, 3}, {5, []string{"y"}, 3}} {
				var entries []templates.LogEntry
				for _, l := range c.lines {
					entries = append(entries, line(l))
				}
				n, err := s.AppendLogsAt(ctx, "b1", c.offset, entries...)
				if err != nil || n != c.want {
					t.Fatalf("AppendLogsAt(%d, %v) = %d, %v; want %d", c.offset, c.lines, n, err, c.want)
				}
			}
			logs, err := s.Logs(ctx, "b1", 0)
			if err != nil || len(logs) != 3 || logs[0].Message != "a" || logs[1].Message != "b" || logs[2].Message != "c" {
				t.Fatalf("log = %+v, %v; want a, b, c", logs, err)
			}
			if _, err := s.AppendLogsAt(ctx, "../b1", 0, line("z")); !errdefs.IsInvalid(err) {
				t.Fatalf("bad build ID: %v", err)
			}
		})
	}
}
