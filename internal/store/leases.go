package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// AcquireLease takes or renews the lease called name for holder until
// now+ttl, and reports whether holder holds it, and if so the lease's
// request count (PokeLease): it does when the lease is new, already held
// by holder, or expired (its expires_at is not after now). One statement decides, so of several replicas asking at once one
// at most gets it. The times are the callers' clocks: replicas sharing a
// lease must keep their clocks within well under ttl of each other.
func (s *SQL) AcquireLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (held bool, requests int64, err error) {
	if ttl <= 0 {
		return false, 0, fmt.Errorf("lease %q: ttl %s is not positive: %w", name, ttl, errdefs.ErrInvalid)
	}
	at := toNanos(now)
	err = s.db.QueryRowContext(ctx, s.d.rebind(`INSERT INTO leases (name, holder, expires_at, renewed_at) VALUES (?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at, renewed_at = excluded.renewed_at
WHERE leases.expires_at <= ? OR leases.holder = excluded.holder
RETURNING requests`), name, holder, toNanos(now.Add(ttl)), at, at).Scan(&requests)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, 0, nil // held by another
	case err != nil:
		return false, 0, classify(err, fmt.Sprintf("lease %q", name))
	}
	return true, requests, nil
}

// PokeLease counts one more request to the holder of the lease called
// name, which sees the count grow at its next renewal. Without a lease row
// (no replica ever led) there is nobody to ask and nothing is counted.
func (s *SQL) PokeLease(ctx context.Context, name string) error {
	if _, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE leases SET requests = requests + 1 WHERE name = ?`), name); err != nil {
		return classify(err, fmt.Sprintf("lease %q", name))
	}
	return nil
}

// ReleaseLease gives up the lease called name if holder holds it, so that
// another replica may take it at once instead of after its expiry.
func (s *SQL) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := s.db.ExecContext(ctx, s.d.rebind(`DELETE FROM leases WHERE name = ? AND holder = ?`), name, holder); err != nil {
		return classify(err, fmt.Sprintf("lease %q", name))
	}
	return nil
}

// LeaseHolder returns who holds the lease called name as of now, or ""
// when nobody does.
func (s *SQL) LeaseHolder(ctx context.Context, name string, now time.Time) (string, error) {
	var holder string
	err := s.db.QueryRowContext(ctx, s.d.rebind(`SELECT holder FROM leases WHERE name = ? AND expires_at > ?`), name, toNanos(now)).Scan(&holder)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil
		}
		return "", classify(err, fmt.Sprintf("lease %q", name))
	}
	return holder, nil
}
