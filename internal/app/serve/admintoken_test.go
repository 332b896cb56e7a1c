package serve

import (
	"errors"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/app/apirole"
	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// TestAdminTokenLength: an admin token shorter than MinAdminTokenLen is
// refused at start with an error naming the flag; none at all leaves the
// admin API off (warren api's own test is apirole's).
func TestAdminTokenLength(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", apirole.MinAdminTokenLen)
	for _, tok := range []string{"", "adm", long[:apirole.MinAdminTokenLen-1], long} {
		cfg := Config{Host: noderole.Host{Driver: "fake", DataDir: t.TempDir()}, Settings: apirole.Settings{AdminToken: tok}}
		err := cfg.setDefaults()
		short := len(tok) > 0 && len(tok) < apirole.MinAdminTokenLen
		switch {
		case short && (!errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "--admin-token")):
			t.Fatalf("token of %d characters: %v, want an invalid-argument error naming --admin-token", len(tok), err)
		case !short && err != nil:
			t.Fatalf("token of %d characters: %v", len(tok), err)
		}
	}
	cfg := Config{Host: noderole.Host{Driver: "fake", DataDir: t.TempDir()}, Settings: apirole.Settings{TrustedProxies: []string{"10.0.0.0/8", "192.0.2.1", "nonsense"}}}
	if err := cfg.setDefaults(); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "--trusted-proxy") {
		t.Fatalf("a bad --trusted-proxy: %v", err)
	}
}
