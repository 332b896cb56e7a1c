package layer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// A tenant's sandbox may hold a file named like a whiteout (".wh.x").
// Written into a layer it would come out on the other side as the
// deletion of "x", not as the file: WriteDiff refuses it, and the
// snapshot stays on its node.
func TestWriteDiffRefusesWhiteoutNames(t *testing.T) {
	upper := t.TempDir()
	if err := os.MkdirAll(filepath.Join(upper, "home"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper, "home", "ok"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	all := func(string) bool { return true }
	var buf bytes.Buffer
	if err := WriteDiff(context.Background(), upper, &buf, all); err != nil {
		t.Fatalf("an ordinary upper: %v", err)
	}
	if err := os.WriteFile(filepath.Join(upper, "home", ".wh.bashrc"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := WriteDiff(context.Background(), upper, &buf, all); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Fatalf("an upper holding .wh.bashrc: err = %v, want unsupported", err)
	}
}
