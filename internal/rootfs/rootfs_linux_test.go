package rootfs

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/testenv"
)

func requireRoot(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "root filesystem tests")
}

func testLog(t testing.TB) *slog.Logger { return testenv.Logger(t) }

func TestWithin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		root, p string
		want    bool
	}{
		{"/a", "/a", true}, {"/a", "/a/b", true}, {"/a", "/ab", false}, {"/a", "/", false}, {"", "/a", false}, {"/a", "/a/../b", false},
	}
	for _, tc := range tests {
		t.Run(tc.root+"|"+tc.p, func(t *testing.T) {
			if got := within(tc.root, filepath.Clean(tc.p)); got != tc.want {
				t.Errorf("within(%q, %q) = %v", tc.root, tc.p, got)
			}
		})
	}
}
