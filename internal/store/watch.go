package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// sandboxChannel is the Postgres notification channel of sandbox row
// changes; the payload is the sandbox ID.
const sandboxChannel = "warren_sandbox_changes"

// watchers holds the in-process subscribers to sandbox row changes.
type watchers struct {
	mu  sync.Mutex
	fns map[int]func(id string)
	n   int
}

func (w *watchers) add(fn func(string)) (remove func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[int]func(string){}
	}
	w.n++
	k := w.n
	w.fns[k] = fn
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.fns, k)
	}
}

func (w *watchers) notify(id string) {
	w.mu.Lock()
	fns := make([]func(string), 0, len(w.fns))
	for _, fn := range w.fns {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(id)
	}
}

// notifyTx tells the other processes on the database, once tx commits,
// that sandbox id's row changed (Postgres only; SQLite is one process's).
func (s *SQL) notifyTx(ctx context.Context, tx *sql.Tx, id string) error {
	if s.d.name != "postgres" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, sandboxChannel, id)
	return err
}

// WatchSandboxes calls fn with the ID of every sandbox whose row changes
// (an update, a delete, or a row stored by RecordSandbox), until ctx ends. A change made through this
// store is told before the call that made it returns; on Postgres, changes
// made by other processes on the database are told as they commit
// (LISTEN/NOTIFY). fn("") means that changes made before it may have been
// missed: it is called once watching is in effect, and again whenever the
// listening connection was lost; forget everything. fn must not block.
func (s *SQL) WatchSandboxes(ctx context.Context, fn func(id string)) error {
	remove := s.watch.add(fn)
	defer remove()
	if s.d.name != "postgres" {
		fn("")
		<-ctx.Done()
		return nil
	}
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		err := s.listen(ctx, fn)
		if ctx.Err() != nil {
			return nil
		}
		fn("")
		s.log.Warn("sandbox change notifications lost; listening again", "error", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

// listen holds one connection LISTENing on sandboxChannel and passes the
// notifications to fn until the connection fails or ctx ends.
func (s *SQL) listen(ctx context.Context, fn func(string)) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("listen: not a pgx connection")
		}
		pc := c.Conn()
		if _, err := pc.Exec(ctx, "LISTEN "+sandboxChannel); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		// Whatever changed before LISTEN took effect is unknown here.
		fn("")
		defer func() {
			// Leave the pooled connection as it was found.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_, _ = pc.Exec(uctx, "UNLISTEN "+sandboxChannel)
		}()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			fn(n.Payload)
		}
	})
}
