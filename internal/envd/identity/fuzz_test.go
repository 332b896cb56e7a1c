package identity

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzResolvePath: whatever path a client sends, ResolvePath gives a clean
// absolute path; absolute paths stay what they say, "~" forms land in the
// home directory, and split gives the non-empty components of the result.
func FuzzResolvePath(f *testing.F) {
	for _, s := range [][2]string{{"a.txt", ""}, {"~/x/../y", ""}, {"/etc//passwd", ""}, {"../../..", "/tmp"}, {"~", "/srv"}, {"", ""}, {"~user", ""}} {
		f.Add(s[0], s[1])
	}
	u := &User{Name: "user", UID: 1000, GID: 1000, Home: "/home/user"}
	f.Fuzz(func(t *testing.T, p, base string) {
		if base != "" && !filepath.IsAbs(base) {
			base = "/" + base
		}
		got := u.ResolvePath(p, base)
		if !filepath.IsAbs(got) || filepath.Clean(got) != got {
			t.Fatalf("ResolvePath(%q, %q) = %q: not clean and absolute", p, base, got)
		}
		if filepath.IsAbs(p) && got != filepath.Clean(p) {
			t.Fatalf("ResolvePath(%q) = %q, want %q", p, got, filepath.Clean(p))
		}
		if p == "~" && got != u.Home {
			t.Fatalf("ResolvePath(~) = %q, want the home directory", got)
		}
		if rest, ok := strings.CutPrefix(p, "~/"); ok && !slices.Contains(strings.Split(rest, "/"), "..") &&
			got != u.Home && !strings.HasPrefix(got, u.Home+"/") {
			t.Fatalf("ResolvePath(%q) = %q: outside the home directory %q", p, got, u.Home)
		}
		if j := "/" + strings.Join(split(got), "/"); j != got {
			t.Fatalf("split(%q) joins back to %q", got, j)
		}
	})
}
