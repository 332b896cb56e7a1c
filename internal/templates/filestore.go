package templates

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/warren-sandbox/warren/internal/atomicfile"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// FileStore is a Store kept as JSON files under one directory:
//
//	templates/<id>.json   one template
//	builds/<id>.json      one build
//	logs/<buildID>.jsonl  one build's log, one entry a line
//
// Every object is written atomically (temporary file, fsync, rename), so a
// crash leaves either the old or the new version. One process owns the
// directory; within it, a mutex serialises writes.
type FileStore struct {
	dir string
	mu  sync.Mutex
}

var _ Store = (*FileStore)(nil)

// fileStoreVersion is written beside the data so a later format can
// migrate it.
const fileStoreVersion = "1"

// NewFileStore opens (creating it if needed) a file store in dir.
func NewFileStore(dir string) (*FileStore, error) {
	for _, sub := range []string{"templates", "builds", "logs", "finishing"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("template store %q: %w", dir, err)
		}
	}
	vf := filepath.Join(dir, "VERSION")
	if b, err := os.ReadFile(vf); err == nil {
		if v := string(bytes.TrimSpace(b)); v != fileStoreVersion {
			return nil, fmt.Errorf("template store %q: format version %q, this Warren reads %q: %w", dir, v, fileStoreVersion, errdefs.ErrUnsupported)
		}
	} else if err := atomicfile.Write(vf, []byte(fileStoreVersion+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("template store %q: %w", dir, err)
	}
	s := &FileStore{dir: dir}
	if err := s.replayJournals(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *FileStore) path(kind, id string) (string, error) {
	if err := CheckID(kind, id); err != nil || filepath.Base(id) != id {
		return "", errdefs.Publicf(errdefs.ErrInvalid, "%s %q: bad ID", kind, id)
	}
	return filepath.Join(s.dir, kind+"s", id+".json"), nil
}

func (s *FileStore) logPath(buildID string) (string, error) {
	p, err := s.path("build", buildID)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.dir, "logs", filepath.Base(p[:len(p)-len(".json")])+".jsonl"), nil
}

func readJSON[T any](kind, p, id string) (*T, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "%s %q", kind, id)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", kind, id, err)
	}
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("%s %q: decode %s: %w", kind, id, p, err)
	}
	return v, nil
}

func writeJSON(p string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(p, append(b, '\n'), 0o600)
}

// CreateTemplate implements Store.
func (s *FileStore) CreateTemplate(ctx context.Context, t *Template) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.path("template", t.ID)
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); err == nil {
		return errdefs.Publicf(errdefs.ErrAlreadyExists, "template %q", t.ID)
	}
	if err := s.checkAliasesLocked(t.ID, t.TeamID, t.Aliases); err != nil {
		return err
	}
	return writeJSON(p, t)
}

// checkAliasesLocked refuses aliases another template of the same team
// (teamID; "" for system templates) already has, and aliases that are
// another template's ID.
func (s *FileStore) checkAliasesLocked(id, teamID string, aliases []string) error {
	all, err := s.listTemplatesLocked()
	if err != nil {
		return err
	}
	for _, other := range all {
		if other.ID == id {
			continue
		}
		for _, a := range aliases {
			if other.ID == a || other.TeamID == teamID && slices.Contains(other.Aliases, a) {
				return errdefs.Publicf(errdefs.ErrAlreadyExists, "template alias %q", a)
			}
		}
	}
	return nil
}

// UpdateTemplate implements Store.
func (s *FileStore) UpdateTemplate(ctx context.Context, id string, fn func(*Template) error) (*Template, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.path("template", id)
	if err != nil {
		return nil, err
	}
	t, err := readJSON[Template]("template", p, id)
	if err != nil {
		return nil, err
	}
	if err := fn(t); err != nil {
		return nil, err
	}
	t.ID = id
	if err := s.checkAliasesLocked(id, t.TeamID, t.Aliases); err != nil {
		return nil, err
	}
	if err := writeJSON(p, t); err != nil {
		return nil, fmt.Errorf("template %q: %w", id, err)
	}
	return t, nil
}

// GetTemplate implements Store.
func (s *FileStore) GetTemplate(ctx context.Context, id string) (*Template, error) {
	p, err := s.path("template", id)
	if err != nil {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "template %q", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return readJSON[Template]("template", p, id)
}

// TemplateByAlias implements Store.
func (s *FileStore) TemplateByAlias(ctx context.Context, teamID, alias string) (*Template, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, err := s.listTemplatesLocked()
	if err != nil {
		return nil, err
	}
	for _, t := range all {
		if t.TeamID == teamID && slices.Contains(t.Aliases, alias) {
			return t, nil
		}
	}
	return nil, errdefs.Publicf(errdefs.ErrNotFound, "template alias %q", alias)
}

// ListTemplates implements Store.
func (s *FileStore) ListTemplates(ctx context.Context) ([]*Template, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listTemplatesLocked()
}

func (s *FileStore) listTemplatesLocked() ([]*Template, error) {
	matches, err := filepath.Glob(filepath.Join(s.dir, "templates", "*.json"))
	if err != nil {
		return nil, err
	}
	out := make([]*Template, 0, len(matches))
	for _, m := range matches {
		id := filepath.Base(m[:len(m)-len(".json")])
		t, err := readJSON[Template]("template", m, id)
		if errdefs.IsNotFound(err) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *Template) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// DeleteTemplate implements Store.
func (s *FileStore) DeleteTemplate(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.path("template", id)
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return errdefs.Publicf(errdefs.ErrNotFound, "template %q", id)
	}
	builds, err := s.listBuildsLocked(id)
	if err != nil {
		return err
	}
	// The template goes first: a crash midway leaves orphan builds, never a
	// template that points at deleted ones.
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("template %q: %w", id, err)
	}
	for _, b := range builds {
		bp, _ := s.path("build", b.ID)
		lp, _ := s.logPath(b.ID)
		if err := os.Remove(bp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("build %q: %w", b.ID, err)
		}
		if err := os.Remove(lp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("build %q log: %w", b.ID, err)
		}
	}
	return nil
}

// CreateBuild implements Store.
func (s *FileStore) CreateBuild(ctx context.Context, b *Build) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.path("build", b.ID)
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); err == nil {
		return errdefs.Publicf(errdefs.ErrAlreadyExists, "build %q", b.ID)
	}
	return writeJSON(p, b)
}

// UpdateBuild implements Store.
func (s *FileStore) UpdateBuild(ctx context.Context, id string, fn func(*Build) error) (*Build, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.path("build", id)
	if err != nil {
		return nil, err
	}
	b, err := readJSON[Build]("build", p, id)
	if err != nil {
		return nil, err
	}
	if err := fn(b); err != nil {
		return nil, err
	}
	b.ID = id
	if err := writeJSON(p, b); err != nil {
		return nil, fmt.Errorf("build %q: %w", id, err)
	}
	return b, nil
}

// GetBuild implements Store.
func (s *FileStore) GetBuild(ctx context.Context, id string) (*Build, error) {
	p, err := s.path("build", id)
	if err != nil {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "build %q", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return readJSON[Build]("build", p, id)
}

// ListBuilds implements Store.
func (s *FileStore) ListBuilds(ctx context.Context, templateID string) ([]*Build, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listBuildsLocked(templateID)
}

func (s *FileStore) listBuildsLocked(templateID string) ([]*Build, error) {
	matches, err := filepath.Glob(filepath.Join(s.dir, "builds", "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*Build
	for _, m := range matches {
		id := filepath.Base(m[:len(m)-len(".json")])
		b, err := readJSON[Build]("build", m, id)
		if errdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if b.TemplateID == templateID {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *Build) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// AppendLogs implements Store. Each entry is one JSON line, appended and
// synced; a torn last line after a crash is skipped when reading.
func (s *FileStore) AppendLogs(ctx context.Context, buildID string, entries ...LogEntry) error {
	if len(entries) == 0 {
		return nil
	}
	p, err := s.logPath(buildID)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, e := range entries {
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("build %q log: %w", buildID, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("build %q log: %w", buildID, err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("build %q log: %w", buildID, err)
	}
	return f.Close()
}

// Logs implements Store.
func (s *FileStore) Logs(ctx context.Context, buildID string, offset int) ([]LogEntry, error) {
	p, err := s.logPath(buildID)
	if err != nil {
		return nil, errdefs.Publicf(errdefs.ErrNotFound, "build %q", buildID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return []LogEntry{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build %q log: %w", buildID, err)
	}
	defer f.Close()
	out := []LogEntry{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	i := 0
	for sc.Scan() {
		var e LogEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // torn line
		}
		if i >= offset {
			out = append(out, e)
		}
		i++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("build %q log: %w", buildID, err)
	}
	return out, nil
}
