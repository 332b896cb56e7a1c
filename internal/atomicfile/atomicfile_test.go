package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for _, want := range []string{"first\n", "second, longer than the first\n", ""} {
		if err := Write(p, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			t.Fatalf("after Write(%q): %q, %v", want, got, err)
		}
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

func TestCommitFromAnotherDir(t *testing.T) {
	t.Parallel()
	scratch, dir := t.TempDir(), t.TempDir()
	f, err := os.CreateTemp(scratch, "state-")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "state.json")
	if err := Commit(f, []byte("entry"), p); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "entry" {
		t.Fatalf("%q, %v", got, err)
	}
	if ents, _ := os.ReadDir(scratch); len(ents) != 0 {
		t.Errorf("scratch file left: %v", ents)
	}
	// A failed rename (target directory gone) removes the temporary file.
	f, _ = os.CreateTemp(scratch, "state-")
	if err := Commit(f, []byte("x"), filepath.Join(dir, "missing", "state.json")); err == nil {
		t.Fatal("commit into a missing directory succeeded")
	}
	if ents, _ := os.ReadDir(scratch); len(ents) != 0 {
		t.Errorf("scratch file left after a failed commit: %v", ents)
	}
}
