package templates

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A crash after a finish's journal was written, with neither document in
// its place yet (or only the build's), is finished by the next open.
func TestFileStoreReplaysInterruptedFinish(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.CreateTemplate(ctx, &Template{ID: "t", Aliases: []string{"tpl"}, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBuild(ctx, &Build{ID: "b", TemplateID: "t", Status: BuildBuilding, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	tm, _ := s.GetTemplate(ctx, "t")
	b, _ := s.GetBuild(ctx, "b")
	tm.Tags = map[string]Tag{DefaultTag: {BuildID: "b", CreatedAt: now}}
	b.Status = BuildReady
	jp, err := s.journalPath("b")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(jp, finishJournal{Build: b, Template: tm}); err != nil {
		t.Fatal(err)
	}
	// A journal whose write the crash cut short is atomicfile's temporary.
	if err := os.WriteFile(filepath.Join(dir, "finishing", ".c.json.tmp123"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetBuild(ctx, "b"); got.Status != BuildBuilding {
		t.Fatalf("the journal alone changed the build: %s", got.Status)
	}

	s2, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s2.GetBuild(ctx, "b"); err != nil || got.Status != BuildReady {
		t.Fatalf("build after the replay = %+v, %v", got, err)
	}
	if got, err := s2.GetTemplate(ctx, "t"); err != nil || got.Tags[DefaultTag].BuildID != "b" || len(got.Aliases) != 1 {
		t.Fatalf("template after the replay = %+v, %v", got, err)
	}
	if _, err := os.Stat(jp); !os.IsNotExist(err) {
		t.Fatalf("journal left after the replay: %v", err)
	}
}

// A journal that names another build than its file, or a template its
// build does not belong to, is refused: the store does not open on it.
func TestFileStoreRefusesForeignJournal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTemplate(ctx, &Template{ID: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTemplate(ctx, &Template{ID: "u"}); err != nil {
		t.Fatal(err)
	}
	jp, _ := s.journalPath("b")
	if err := writeJSON(jp, finishJournal{Build: &Build{ID: "b", TemplateID: "t"}, Template: &Template{ID: "u"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFileStore(dir); err == nil {
		t.Fatal("a journal pairing build b of t with template u was applied")
	}
	if got, _ := s.GetTemplate(ctx, "u"); got.ID != "u" || len(got.Tags) != 0 {
		t.Fatalf("template u changed: %+v", got)
	}
}
