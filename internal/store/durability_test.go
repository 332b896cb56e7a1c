package store

import (
	"context"
	"path/filepath"
	"testing"
)

// TestSQLiteDurableCommits: every connection of a SQLite store runs in WAL
// mode with synchronous=FULL, so an acknowledged commit has its WAL frames
// synced (NORMAL, 1, would lose the last commits on a power loss).
func TestSQLiteDurableCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "warren.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The pool may replace its one connection; each one opened takes the
	// DSN's pragmas, so ask twice around a forced reconnect.
	for round := range 2 {
		var mode string
		var sync int
		if err := s.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := s.db.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || sync != 2 {
			t.Errorf("round %d: journal_mode %q synchronous %d, want wal and 2 (FULL)", round, mode, sync)
		}
		s.db.SetMaxIdleConns(0) // the connection is closed once idle
		s.db.SetMaxIdleConns(2)
	}
}
