package templates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A build's finish changes two files, the build's and its template's. The
// file store first writes both new documents to one journal file under
// finishing/, then each document in its place, then removes the journal;
// opening the store writes again what a journal left there holds. So a
// crash anywhere leaves both changes or neither.

type finishJournal struct {
	Build    *Build    `json:"build"`
	Template *Template `json:"template"`
}

func (s *FileStore) journalPath(buildID string) (string, error) {
	if err := CheckID("build", buildID); err != nil || filepath.Base(buildID) != buildID {
		return "", fmt.Errorf("build %q: bad ID: %w", buildID, err)
	}
	return filepath.Join(s.dir, "finishing", buildID+".json"), nil
}

// FinishBuild implements Store.
func (s *FileStore) FinishBuild(ctx context.Context, id string, fnBuild func(*Build) error, fnTemplate func(*Template) error) (*Build, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bp, err := s.path("build", id)
	if err != nil {
		return nil, err
	}
	b, err := readJSON[Build]("build", bp, id)
	if err != nil {
		return nil, err
	}
	if err := fnBuild(b); err != nil {
		return nil, err
	}
	b.ID = id
	tp, err := s.path("template", b.TemplateID)
	if err != nil {
		return nil, err
	}
	t, err := readJSON[Template]("template", tp, b.TemplateID)
	if err != nil {
		return nil, fmt.Errorf("build %q: %w", id, err)
	}
	if err := fnTemplate(t); err != nil {
		return nil, err
	}
	t.ID = b.TemplateID
	if err := s.checkAliasesLocked(t.ID, t.TeamID, t.Aliases); err != nil {
		return nil, err
	}
	jp, err := s.journalPath(id)
	if err != nil {
		return nil, err
	}
	if err := writeJSON(jp, finishJournal{Build: b, Template: t}); err != nil {
		return nil, fmt.Errorf("build %q: finish journal: %w", id, err)
	}
	if err := s.applyJournalLocked(jp); err != nil {
		return nil, err
	}
	return b, nil
}

// applyJournalLocked writes a finish journal's documents in their places
// and removes it.
func (s *FileStore) applyJournalLocked(jp string) error {
	data, err := os.ReadFile(jp)
	if err != nil {
		return fmt.Errorf("finish journal %s: %w", jp, err)
	}
	var j finishJournal
	if err := json.Unmarshal(data, &j); err != nil || j.Build == nil || j.Template == nil ||
		strings.TrimSuffix(filepath.Base(jp), ".json") != j.Build.ID || j.Build.TemplateID != j.Template.ID {
		return fmt.Errorf("finish journal %s: not a journal of its build (%v)", jp, err)
	}
	bp, err := s.path("build", j.Build.ID)
	if err != nil {
		return err
	}
	tp, err := s.path("template", j.Template.ID)
	if err != nil {
		return err
	}
	if err := writeJSON(bp, j.Build); err != nil {
		return fmt.Errorf("build %q: %w", j.Build.ID, err)
	}
	// A template deleted after its journal was written stays deleted.
	if _, err := os.Stat(tp); err == nil {
		if err := writeJSON(tp, j.Template); err != nil {
			return fmt.Errorf("template %q: %w", j.Template.ID, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("template %q: %w", j.Template.ID, err)
	}
	if err := os.Remove(jp); err != nil {
		return fmt.Errorf("finish journal %s: %w", jp, err)
	}
	return nil
}

// replayJournals finishes the build finishes a crash interrupted.
func (s *FileStore) replayJournals() error {
	dir := filepath.Join(s.dir, "finishing")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("template store %q: %w", s.dir, err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue // atomicfile's temporary, never renamed into place
		}
		if err := s.applyJournalLocked(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("template store %q: %w", s.dir, err)
		}
	}
	return nil
}
