package noderole

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/egressproxy"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// TestEgressSecret: the node's egress CA secret is made once (0600, of
// the proxy's size, no temporary file left), read back the same at every
// later start, and a file of another size is refused, not replaced (the
// CAs in sandboxes' trust stores derive from it).
func TestEgressSecret(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	first, err := egressSecret(dir)
	if err != nil || len(first) != egressproxy.SecretSize {
		t.Fatalf("first start: %d bytes, %v", len(first), err)
	}
	path := filepath.Join(dir, egressCASecretFile)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v, %v", fi, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	again, err := egressSecret(dir)
	if err != nil || !bytes.Equal(again, first) {
		t.Fatalf("second start: a different secret (%v)", err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := egressSecret(dir); !errdefs.IsInvalid(err) {
		t.Fatalf("an empty secret file: %v, want invalid", err)
	}
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Errorf("an empty secret file was replaced")
	}
}
