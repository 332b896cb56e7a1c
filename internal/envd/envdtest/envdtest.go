// Package envdtest holds helpers shared by envd's tests: prerequisites that
// skip locally and fail under CI=true, and throwaway users.
package envdtest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"testing"

	"github.com/warren-sandbox/warren/internal/envd/identity"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// Require skips the test with reason, or fails it when CI=true.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	testenv.Require(t, ok, reason)
}

// RequireRoot needs the test to run as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root")
}

// Nobody returns the user "nobody" (root only).
func Nobody(t testing.TB) *identity.User {
	t.Helper()
	RequireRoot(t)
	u, err := identity.Lookup("nobody")
	Require(t, err == nil, "needs the user nobody")
	return u
}

// NewUser creates a user with a home directory for the test and removes it
// afterwards (root only).
func NewUser(t testing.TB) *identity.User {
	t.Helper()
	RequireRoot(t)
	_, err := exec.LookPath("useradd")
	Require(t, err == nil, "needs useradd")
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "wtest" + hex.EncodeToString(b[:])
	if out, err := exec.Command("useradd", "--create-home", "--shell", "/bin/sh", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", "--remove", name).CombinedOutput(); err != nil {
			t.Logf("userdel %s: %v: %s", name, err, out)
		}
	})
	u, err := identity.Lookup(name)
	if err != nil {
		t.Fatalf("lookup %s: %v", name, err)
	}
	return u
}
