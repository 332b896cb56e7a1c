package buildcontext

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
)

// writeFiles makes files under dir; a content "->target" is a symlink.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func open(t *testing.T, dir string) *Context {
	t.Helper()
	bc, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bc.Close() })
	return bc
}

// TestContextFiles lists what COPY sources name, less .dockerignore's.
func TestContextFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a.txt": "a", "b.log": "b", "app/x.go": "x", "app/x.log": "l", "app/node_modules/m/i.js": "i",
		"app/keep/y.txt": "y", "docs/d.md": "d", ".dockerignore": "*.log\n**/node_modules\n# comment\n\napp/keep\n!app/keep/y.txt\n",
	})
	bc := open(t, dir)
	for _, tc := range []struct {
		src     string
		want    []string
		wantErr string
	}{
		{src: "a.txt", want: []string{"a.txt"}},
		{src: "/a.txt", want: []string{"a.txt"}},
		{src: "../../a.txt", want: []string{"a.txt"}}, // never outside the context
		{src: "*.txt", want: []string{"a.txt"}},
		{src: "app", want: []string{"app", "app/keep/y.txt", "app/x.go", "app/x.log"}},
		{src: ".", want: []string{"", ".dockerignore", "a.txt", "app", "app/keep/y.txt", "app/x.go", "app/x.log", "docs", "docs/d.md"}},
		{src: "b.log", wantErr: "no such file in the build context"},
		{src: "nope", wantErr: "no such file in the build context"},
	} {
		t.Run(tc.src, func(t *testing.T) {
			t.Parallel()
			files, err := bc.Files(tc.src)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range files {
				got = append(got, f.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("files(%q) = %q, want %q", tc.src, got, tc.want)
			}
		})
	}
}

// TestFilesHashMatchesSDK compares the COPY hashes with those of the real
// e2b SDK (Template.toJSON computes them), so that the server's upload
// cache serves builds from both.
func TestFilesHashMatchesSDK(t *testing.T) {
	t.Parallel()
	sdk, err := filepath.Abs("../../../e2e/node_modules/e2b/dist/index.mjs")
	if err != nil {
		t.Fatal(err)
	}
	_, nodeErr := exec.LookPath("node")
	e2eserve.Require(t, nodeErr == nil, "node is not installed")
	e2eserve.Require(t, e2eserve.Exists(sdk), "e2e/node_modules/e2b missing; run npm ci in e2e/")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "hello\n", "app/x.go": "package x\n", "app/sub/y.bin": "\x00\x01", "link": "->a.txt", "app/empty/.keep": ""})
	if err := os.Chmod(filepath.Join(dir, "app/sub/y.bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	copies := [][2]string{{"a.txt", "./"}, {"app", "/opt/app/"}, {".", "/x/"}, {"link", "/y"}, {"app/*.go", "/z/"}}
	script := filepath.Join(t.TempDir(), "hash.mjs")
	os.WriteFile(script, []byte(`const { Template } = await import(process.argv[2])
const [dir, ...pairs] = process.argv.slice(3)
let t = Template({ fileContextPath: dir }).fromImage('debian:bookworm')
for (let i = 0; i < pairs.length; i += 2) t = t.copy(pairs[i], pairs[i + 1])
console.log(await Template.toJSON(t, true))
`), 0o644)
	args := []string{script, "file://" + sdk, dir}
	for _, c := range copies {
		args = append(args, c[0], c[1])
	}
	out, err := exec.Command("node", args...).Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var sdkJSON struct {
		Steps []struct {
			Args      []string `json:"args"`
			FilesHash string   `json:"filesHash"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(out, &sdkJSON); err != nil || len(sdkJSON.Steps) != len(copies) {
		t.Fatalf("SDK answer %s: %v", out, err)
	}
	bc := open(t, dir)
	for i, c := range copies {
		files, err := bc.Files(c[0])
		if err != nil {
			t.Fatal(err)
		}
		got, err := bc.Hash("COPY", c[0], c[1], files)
		if err != nil {
			t.Fatal(err)
		}
		if want := sdkJSON.Steps[i].FilesHash; got != want {
			t.Errorf("COPY %s %s: hash %s, the SDK's %s", c[0], c[1], got, want)
		}
	}
}
