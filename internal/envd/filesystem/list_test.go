package filesystem

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/warren-sandbox/warren/api/envd/filesystem"
)

// TestListDirOrder: ListDir is a depth-first walk in lexical order of the
// names in each directory (a directory, then what is below it, then its
// next sibling), whatever order the file system keeps them in, as
// upstream envd (filepath.WalkDir) and the SDK's files.list tests expect.
func TestListDirOrder(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	// The SDK test's tree, created in an order that is not the listing's,
	// plus enough siblings that a directory's own order (hashed on ext4,
	// newest first on tmpfs) is not lexical by chance.
	for _, d := range []string{"subdir2/subdir2_2", "subdir2/subdir2_1", "subdir1/subdir1_2", "subdir1/subdir1_1"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var many []string
	for i := 25; i >= 0; i-- {
		name := fmt.Sprintf("m%c%02d", 'a'+i, i)
		many = append(many, name)
		if err := os.WriteFile(filepath.Join(dir, "subdir1", "subdir1_1", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(many)
	if err := os.WriteFile(filepath.Join(dir, "file1.txt"), []byte("Hello, world!"), 0o644); err != nil {
		t.Fatal(err)
	}
	below11 := make([]string, 0, len(many))
	for _, m := range many {
		below11 = append(below11, "subdir1/subdir1_1/"+m)
	}
	cases := []struct {
		depth uint32
		want  []string
	}{
		{0, []string{"file1.txt", "subdir1", "subdir2"}},
		{1, []string{"file1.txt", "subdir1", "subdir2"}},
		{2, []string{"file1.txt", "subdir1", "subdir1/subdir1_1", "subdir1/subdir1_2", "subdir2", "subdir2/subdir2_1", "subdir2/subdir2_2"}},
		{3, slices.Concat([]string{"file1.txt", "subdir1", "subdir1/subdir1_1"}, below11,
			[]string{"subdir1/subdir1_2", "subdir2", "subdir2/subdir2_1", "subdir2/subdir2_2"})},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("depth %d", tc.depth), func(t *testing.T) {
			// Several times: an order that is not fixed shows.
			for range 3 {
				ls, err := c.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: dir, Depth: tc.depth}))
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, e := range ls.Msg.GetEntries() {
					rel, _ := filepath.Rel(dir, e.GetPath())
					if e.GetName() != filepath.Base(rel) {
						t.Fatalf("entry %q named %q", rel, e.GetName())
					}
					got = append(got, rel)
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("listing\n got %q\nwant %q", got, tc.want)
				}
			}
		})
	}
}
