package apirole

import (
	"errors"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeauth"
)

// TestAdminTokenLength: an admin token shorter than MinAdminTokenLen is
// refused at start, by warren api as by warren serve (whose test is
// serve's), with an error naming the flag; none at all leaves the admin
// API off. A bad trusted proxy is refused too.
func TestAdminTokenLength(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", MinAdminTokenLen)
	for _, tok := range []string{"", "adm", long[:MinAdminTokenLen-1], long} {
		api := Config{Settings: Settings{DatabaseURL: "postgres://x/y", AdminToken: tok}, NodeCredentialKey: strings.Repeat("n", nodeauth.MinKeyLen)}
		err := api.setDefaults()
		short := len(tok) > 0 && len(tok) < MinAdminTokenLen
		switch {
		case short && (!errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "--admin-token")):
			t.Fatalf("token of %d characters: %v, want an invalid-argument error naming --admin-token", len(tok), err)
		case !short && err != nil:
			t.Fatalf("token of %d characters: %v", len(tok), err)
		}
	}
	api := Config{Settings: Settings{DatabaseURL: "postgres://x/y", TrustedProxies: []string{"nonsense"}}, NodeCredentialKey: strings.Repeat("n", nodeauth.MinKeyLen)}
	if err := api.setDefaults(); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "--trusted-proxy") {
		t.Fatalf("a bad --trusted-proxy: %v", err)
	}
}
