package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadSecretsKey: the key comes from --secrets-key-file, else the
// environment; a bad key is an error that does not repeat it.
func TestLoadSecretsKey(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "key")
	os.WriteFile(good, []byte("ABEiM0RVZneImaq7zN3u/wARIjNEVWZ3iJmqu8zd7v8=\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("not-a-key-but-a-password"), 0o600)

	t.Setenv("WARREN_SECRETS_KEY", "")
	t.Setenv("WARREN_SECRETS_KEY_FILE", "")
	if k, err := loadSecretsKey(""); k != nil || err != nil {
		t.Fatalf("no key = %x, %v", k, err)
	}
	k, err := loadSecretsKey(good)
	if err != nil || len(k) != 32 || k[1] != 0x11 {
		t.Fatalf("key file = %x, %v", k, err)
	}
	if _, err := loadSecretsKey(empty); err == nil {
		t.Fatal("an empty key file is accepted")
	}
	if _, err := loadSecretsKey(bad); err == nil || strings.Contains(err.Error(), "password") {
		t.Fatalf("a bad key file = %v", err)
	}
	if _, err := loadSecretsKey(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing key file is accepted")
	}
	t.Setenv("WARREN_SECRETS_KEY", strings.Repeat("ab", 32))
	if k, err := loadSecretsKey(""); err != nil || !bytes.Equal(k, bytes.Repeat([]byte{0xab}, 32)) {
		t.Fatalf("env key = %x, %v", k, err)
	}
	t.Setenv("WARREN_SECRETS_KEY_FILE", good)
	if k, err := loadSecretsKey(""); err != nil || k[1] != 0x11 {
		t.Fatalf("env key file = %x, %v", k, err)
	}
}
