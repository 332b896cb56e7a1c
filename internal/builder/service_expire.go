package builder

import (
	"context"
	"errors"
	"time"

	"github.com/warren-sandbox/warren/internal/templates"
)

// DefaultWaitingMaxAge is how long a build may wait to be started (POST
// /v3/templates made it; its file uploads and the build start have not
// come) before the template collector fails it.
const DefaultWaitingMaxAge = time.Hour

// errNotWaiting stops an expiry whose build has left the waiting state.
var errNotWaiting = errors.New("build is no longer waiting")

// ExpireWaiting fails the builds that were made before `before` and are
// still waiting to be started (a client that gave up between creating a
// template and starting its build), so that they stop holding their
// template's uploads and show a reason. A build being started in this
// process is left alone. It returns how many it failed.
func (s *Service) ExpireWaiting(ctx context.Context, before time.Time) (int, error) {
	all, err := s.cat.List(ctx, "")
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, t := range all {
		builds, err := s.cat.Builds(ctx, t.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, b := range builds {
			if b.Status != templates.BuildWaiting || !b.CreatedAt.Before(before) {
				continue
			}
			s.mu.Lock()
			_, starting := s.done[b.ID]
			if !starting {
				_, err = s.cat.UpdateBuild(ctx, b.ID, func(x *templates.Build) error {
					if x.Status != templates.BuildWaiting {
						return errNotWaiting
					}
					x.Status, x.FinishedAt = templates.BuildError, time.Now().UTC()
					x.Reason = &templates.Reason{Message: "the build was never started: it waited longer than " + time.Since(b.CreatedAt).Round(time.Minute).String()}
					return nil
				})
			}
			s.mu.Unlock()
			switch {
			case starting || errors.Is(err, errNotWaiting):
			case err != nil:
				errs = append(errs, err)
			default:
				n++
				s.log.Info("waiting build expired", "template_id", t.ID, "build_id", b.ID, "created_at", b.CreatedAt)
			}
		}
	}
	return n, errors.Join(errs...)
}
