package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// uploadQuota is what a team may keep of uploaded build contexts, and the
// largest template disk.
type uploadQuota struct {
	mu     sync.Mutex // serializes the check and the store of an upload
	files  int
	bytes  int64
	diskMB int64
}

// checkDisk refuses a template whose disk is larger than the operator
// allows.
func (s *Service) checkDisk(req templates.CreateRequest) error {
	if req.DiskMB > s.quota.diskMB {
		return fmt.Errorf("disk size %d MiB (minFreeDiskMb) is more than this server allows for a template (%d MiB, serve --max-template-disk-mb): %w", req.DiskMB, s.quota.diskMB, errdefs.ErrInvalid)
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

// checkUploads refuses a new upload of adding bytes when the team is at
// its quota.
func (s *Service) checkUploads(ctx context.Context, teamID string, adding int64) error {
	n, size, err := s.teamUploads(ctx, teamID)
	if err != nil {
		return err
	}
	if n+1 > s.quota.files {
		return fmt.Errorf("the team keeps %d uploaded build contexts, the most this server allows: %w", n, errdefs.ErrExhausted)
	}
	if size+adding > s.quota.bytes {
		return fmt.Errorf("the team's uploaded build contexts would take %d bytes, more than this server allows (%d): %w", size+adding, s.quota.bytes, errdefs.ErrExhausted)
	}
	return nil
}

// checkUploadOf checks the quota of templateID's team for the stored
// upload file.
func (s *Service) checkUploadOf(ctx context.Context, templateID, file string) error {
	t, err := s.cat.Store().GetTemplate(ctx, templateID)
	if err != nil {
		return fmt.Errorf("template %q: %w", templateID, err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}
	return s.checkUploads(ctx, t.TeamID, fi.Size())
}
