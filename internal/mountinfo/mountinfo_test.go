package mountinfo

import (
	"slices"
	"strings"
	"testing"
)

const table = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:25 / /data rw - ext4 /dev/sdb1 rw
31 30 0:26 / /data/work/a rw - overlay overlay rw
32 31 0:27 / /data/work/a/b rw - tmpfs tmpfs rw
33 30 0:28 / /data/work/a rw - overlay overlay rw
34 30 0:29 / /data/with\040space rw - tmpfs tmpfs rw
35 22 0:30 / /database rw - tmpfs tmpfs rw
`

func TestParseAndBelow(t *testing.T) {
	t.Parallel()
	all, err := Parse(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	if all[5] != "/data/with space" {
		t.Errorf("escaped path parsed as %q", all[5])
	}
	for _, tc := range []struct {
		dir       string
		inclusive bool
		want      []string
	}{
		// Deepest first; the upper of the two mounts on /data/work/a (33) first.
		{"/data/work", false, []string{"/data/work/a/b", "/data/work/a", "/data/work/a"}},
		{"/data/", false, []string{"/data/work/a/b", "/data/work/a", "/data/work/a", "/data/with space"}},
		{"/data", true, []string{"/data/work/a/b", "/data/work/a", "/data/work/a", "/data/with space", "/data"}},
		{"/data/work/a/b", false, nil},
		{"/nothing", true, nil},
	} {
		got := below(all, tc.dir, tc.inclusive)
		if !slices.Equal(got, tc.want) {
			t.Errorf("below(%q, %v) = %q, want %q", tc.dir, tc.inclusive, got, tc.want)
		}
	}
}

func TestUnescape(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`/a\040b`: "/a b", `/tab\011x`: "/tab\tx", `/back\134slash`: `/back\slash`,
		`/plain`: "/plain", `/odd\04`: `/odd\04`, `/not\999`: `/not\999`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMountPointsHasRoot(t *testing.T) {
	t.Parallel()
	all, err := MountPoints()
	if err != nil {
		t.Skipf("no %s here: %v", File, err)
	}
	if !slices.Contains(all, "/") {
		t.Errorf("no / among %d mount points", len(all))
	}
}

func TestParseMounts(t *testing.T) {
	t.Parallel()
	const ns = "66 46 0:4 net:[4026532179] /run/netns/sbx-a rw - nsfs nsfs rw\n" +
		"bad line\n" +
		"67 46 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw\n"
	got, err := ParseMounts(strings.NewReader(table + ns))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 9 {
		t.Fatalf("parsed %d mounts, want 9: %+v", len(got), got)
	}
	want := []Mount{
		{ID: 34, Parent: 30, Root: "/", Point: "/data/with space", FSType: "tmpfs"},
		{ID: 66, Parent: 46, Root: "net:[4026532179]", Point: "/run/netns/sbx-a", FSType: "nsfs"},
		{ID: 67, Parent: 46, Root: "/run/netns", Point: "/run/netns", FSType: "ext4"},
	}
	for i, w := range want {
		if g := got[[]int{5, 7, 8}[i]]; g != w {
			t.Errorf("mount %d = %+v, want %+v", i, g, w)
		}
	}
}
