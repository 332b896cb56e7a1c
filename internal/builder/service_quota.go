package builder

import (
	"context"
	"os"
	"path/filepath"
	"sync"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// uploadQuota is what a team may keep of uploaded build contexts, and the
// largest template disk. Uploads in progress hold their team's quota as
// they stream (reservation): what a team has on disk, stored and being
// written, never passes its quota, whatever runs in parallel.
type uploadQuota struct {
	mu     sync.Mutex // serializes every check with the change it admits
	files  int
	bytes  int64
	diskMB int64
	held   map[string]*teamHold // per team, by the uploads in progress
}

// teamHold is what a team's uploads in progress hold: one context each
// and the bytes they wrote or declared.
type teamHold struct {
	files int
	bytes int64
}

// reserveChunk is how much more an upload's reservation asks for at once
// while it streams (so that the team's stored bytes are not counted at
// every write); near the quota it asks only for what it needs.
const reserveChunk = 16 << 20

// checkDisk refuses a template whose disk is larger than the operator
// allows.
func (s *Service) checkDisk(req templates.CreateRequest) error {
	if req.DiskMB > s.quota.diskMB {
		return errdefs.Publicf(errdefs.ErrInvalid, "disk size %d MiB (minFreeDiskMb) is more than this server allows for a template (%d MiB, serve --max-template-disk-mb)", req.DiskMB, s.quota.diskMB)
	}
	return nil
}

// teamUploads counts the uploaded contexts a team keeps and their stored
// bytes, over all its templates.
func (s *Service) teamUploads(ctx context.Context, teamID string) (n int, size int64, err error) {
	ts, err := s.cat.List(ctx, teamID)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range ts {
		if t.TeamID != teamID || !safeName(t.ID) {
			continue // public templates of other teams are listed too
		}
		entries, err := os.ReadDir(filepath.Join(s.b.cfg.DataDir, "files", t.ID))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
				n++
				size += fi.Size()
			}
		}
	}
	return n, size, nil
}

// checkLocked refuses adding files contexts and bytes to what team keeps
// and holds. s.quota.mu is held.
func (s *Service) checkLocked(ctx context.Context, teamID string, files int, bytes int64) error {
	n, size, err := s.teamUploads(ctx, teamID)
	if err != nil {
		return err
	}
	if h := s.quota.held[teamID]; h != nil {
		n, size = n+h.files, size+h.bytes
	}
	if n+files > s.quota.files {
		return errdefs.Publicf(errdefs.ErrExhausted, "the team keeps %d uploaded build contexts (those being uploaded included), the most this server allows", n)
	}
	if size+bytes > s.quota.bytes {
		return errdefs.Publicf(errdefs.ErrExhausted, "the team's uploaded build contexts would take %d bytes (those being uploaded included), more than this server allows (%d)", size+bytes, s.quota.bytes)
	}
	return nil
}

// checkUploads refuses a new upload when the team is at its quota.
func (s *Service) checkUploads(ctx context.Context, teamID string) error {
	s.quota.mu.Lock()
	defer s.quota.mu.Unlock()
	return s.checkLocked(ctx, teamID, 1, 0)
}

// reservation is one upload's hold on its team's quota: one context and
// the bytes it may write.
type reservation struct {
	s     *Service
	team  string
	bytes int64 // held
	done  bool
}

// reserve takes one context and declared bytes (0 when unknown) of
// team's quota for an upload, or ErrExhausted.
func (s *Service) reserve(ctx context.Context, teamID string, declared int64) (*reservation, error) {
	q := &s.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := s.checkLocked(ctx, teamID, 1, max(declared, 0)); err != nil {
		return nil, err
	}
	if q.held == nil {
		q.held = map[string]*teamHold{}
	}
	h := q.held[teamID]
	if h == nil {
		h = &teamHold{}
		q.held[teamID] = h
	}
	h.files++
	h.bytes += max(declared, 0)
	return &reservation{s: s, team: teamID, bytes: max(declared, 0)}, nil
}

// cover makes the reservation hold at least total bytes: a chunk more
// when the quota allows, else just what is needed, else ErrExhausted.
func (r *reservation) cover(ctx context.Context, total int64) error {
	if total <= r.bytes {
		return nil
	}
	q := &r.s.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	need := total - r.bytes
	grow := max(need, reserveChunk)
	if err := r.s.checkLocked(ctx, r.team, 0, grow); err != nil {
		grow = need
		if err := r.s.checkLocked(ctx, r.team, 0, grow); err != nil {
			return err
		}
	}
	q.held[r.team].bytes += grow
	r.bytes += grow
	return nil
}

// release gives the reservation back, after commit (when set) ran under
// the quota's lock: what commit stores is counted as stored the moment
// the reservation stops counting it.
func (r *reservation) release(commit func() error) error {
	q := &r.s.quota
	q.mu.Lock()
	defer q.mu.Unlock()
	if r.done {
		return nil
	}
	var err error
	if commit != nil {
		err = commit()
	}
	r.done = true
	h := q.held[r.team]
	h.files--
	h.bytes -= r.bytes
	if h.files <= 0 {
		delete(q.held, r.team)
	}
	return err
}

// quotaWriter writes to w what the reservation covers, asking for more
// before each write: a write the team's quota does not allow fails with
// ErrExhausted and nothing of it reaches the disk.
type quotaWriter struct {
	ctx context.Context
	w   *os.File
	r   *reservation
	n   int64
}

func (q *quotaWriter) Write(p []byte) (int, error) {
	if err := q.r.cover(q.ctx, q.n+int64(len(p))); err != nil {
		return 0, err
	}
	n, err := q.w.Write(p)
	q.n += int64(n)
	return n, err
}
