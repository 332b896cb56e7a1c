package oci

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCapLog: a sandbox writing without end into its log cannot grow it
// past the cap; the newest output stays and the writer goes on.
func TestCapLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, release, err := OpenLog(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	const max = 4096
	if cut, err := CapLog(dir, max); cut || err != nil {
		t.Fatalf("small log: %t %v", cut, err)
	}
	for i := range 100 {
		f.Write(bytes.Repeat([]byte{byte('a' + i%26)}, 99))
		f.Write([]byte("\n"))
	}
	f.Write([]byte("newest line\n"))
	cut, err := CapLog(dir, max)
	if err != nil || !cut {
		t.Fatalf("CapLog = %t, %v", cut, err)
	}
	f.Write([]byte("after the cut\n"))
	b, err := os.ReadFile(filepath.Join(dir, RuntimeLogFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > max || !strings.HasPrefix(string(b), "[warren: earlier output dropped") ||
		!strings.HasSuffix(string(b), "newest line\nafter the cut\n") {
		t.Fatalf("log after the cap (%d bytes): %q", len(b), b)
	}
	if _, err := CapLog(t.TempDir(), max); err != nil {
		t.Fatalf("missing log: %v", err)
	}
}
