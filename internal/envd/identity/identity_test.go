package identity

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warren-sandbox/warren/internal/testenv"
)

func TestResolvePath(t *testing.T) {
	t.Parallel()
	u := &User{Name: "user", Home: "/home/user"}
	cases := []struct{ in, base, want string }{
		{"a.txt", "", "/home/user/a.txt"},
		{"~", "", "/home/user"},
		{"~/x/../y", "", "/home/user/y"},
		{"../../etc/passwd", "", "/etc/passwd"},
		{"/abs//p/./q", "", "/abs/p/q"},
		{"rel", "/work", "/work/rel"},
		{"", "", "/home/user"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			if got := u.ResolvePath(tc.in, tc.base); got != tc.want {
				t.Fatalf("got %q want %q", got, tc.want)
			}
		})
	}
}

func TestCheckAccess(t *testing.T) {
	testenv.NeedRoot(t, "user switching tests")
	t.Parallel()
	base, err := os.MkdirTemp("/tmp", "identity-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	_ = os.Chmod(base, 0o755)
	priv := filepath.Join(base, "priv")
	_ = os.Mkdir(priv, 0o700)
	_ = os.WriteFile(filepath.Join(priv, "f"), nil, 0o644)
	pub := filepath.Join(base, "pub.txt")
	_ = os.WriteFile(pub, nil, 0o644)
	sticky := filepath.Join(base, "sticky")
	_ = os.Mkdir(sticky, 0o777)
	_ = os.Chmod(sticky, 0o777|os.ModeSticky)
	_ = os.WriteFile(filepath.Join(sticky, "roots"), nil, 0o666)
	_ = os.Symlink("priv", filepath.Join(base, "privlink"))
	_ = os.Symlink(pub, filepath.Join(base, "publink"))
	u := &User{Name: "u", UID: 4242, GID: 4242, Groups: []uint32{4242}}
	cases := []struct {
		name string
		err  error
		ok   bool
	}{
		{"read public", u.CheckAccess(pub, Read), true},
		{"write public", u.CheckAccess(pub, Write), false},
		{"inside private dir", u.CheckAccess(filepath.Join(priv, "f"), Read), false},
		{"search private dir", u.CheckAccess(priv, Execute), false},
		{"through a link to a private dir", u.CheckAccess(filepath.Join(base, "privlink", "f"), Read), false},
		{"through a link to a public file", u.CheckAccess(filepath.Join(base, "publink"), Read), true},
		{"dotdot from the private dir", u.CheckAccess(priv+"/../pub.txt", Read), false},
		{"missing", u.CheckAccess(filepath.Join(base, "nope"), Read), false},
		{"root reads private", (&User{Name: "root"}).CheckAccess(filepath.Join(priv, "f"), Read|Write), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if (tc.err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", tc.err, tc.ok)
			}
		})
	}
}
