package apiserver

import (
	"context"
	"sync"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// snapshotSlots counts the snapshots each team has in progress in this
// process: a snapshot counts against the team's maxSnapshots from the
// moment it is accepted, not only once it is recorded, so parallel
// requests cannot pass the limit.
type snapshotSlots struct {
	mu       sync.Mutex // held across the count, so two checks never overlap
	inFlight map[string]int
}

// reserveSnapshot takes one of team's snapshots under limit (0: none):
// the recorded ones and those in progress. It returns ErrExhausted at the
// limit, else a release to call once the snapshot is recorded or failed.
func (s *Server) reserveSnapshot(ctx context.Context, teamID string, limit int) (release func(), err error) {
	if limit <= 0 {
		return func() {}, nil
	}
	sl := &s.snapshots
	sl.mu.Lock()
	defer sl.mu.Unlock()
	n, err := s.countSnapshots(ctx, teamID)
	if err != nil {
		return nil, err
	}
	if n+sl.inFlight[teamID] >= limit {
		return nil, errdefs.Publicf(errdefs.ErrExhausted, "you have reached the maximum number of snapshots (%d, those in progress included); delete a snapshot or ask for a higher limit", limit)
	}
	if sl.inFlight == nil {
		sl.inFlight = map[string]int{}
	}
	sl.inFlight[teamID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			sl.mu.Lock()
			defer sl.mu.Unlock()
			if sl.inFlight[teamID]--; sl.inFlight[teamID] <= 0 {
				delete(sl.inFlight, teamID)
			}
		})
	}, nil
}
