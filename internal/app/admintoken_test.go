package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeauth"
)

// TestAdminTokenLength: an admin token shorter than MinAdminTokenLen is
// refused at start, by warren serve and warren api alike, with an error
// naming the flag; none at all leaves the admin API off.
func TestAdminTokenLength(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", MinAdminTokenLen)
	check := func(t *testing.T, err error, token string) {
		t.Helper()
		short := len(token) > 0 && len(token) < MinAdminTokenLen
		switch {
		case short && (!errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "--admin-token")):
			t.Fatalf("token of %d characters: %v, want an invalid-argument error naming --admin-token", len(token), err)
		case !short && err != nil:
			t.Fatalf("token of %d characters: %v", len(token), err)
		}
	}
	for _, tok := range []string{"", "adm", long[:MinAdminTokenLen-1], long} {
		serve := Config{Driver: "fake", DataDir: t.TempDir(), AdminToken: tok}
		check(t, serve.setDefaults(), tok)
		api := APIConfig{DatabaseURL: "postgres://x/y", NodeCredentialKey: strings.Repeat("n", nodeauth.MinKeyLen), AdminToken: tok}
		check(t, api.setDefaults(), tok)
	}
	serve := Config{Driver: "fake", DataDir: t.TempDir(), TrustedProxies: []string{"10.0.0.0/8", "192.0.2.1", "nonsense"}}
	if err := serve.setDefaults(); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "--trusted-proxy") {
		t.Fatalf("a bad --trusted-proxy: %v", err)
	}
}
