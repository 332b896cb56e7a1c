package mcpgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCatalogPins: every npm server of the catalog has its package.json
// and lockfile under catalog/<name>, naming its package alone, at the
// version the lockfile pins, every package of the tree with its sha512
// from the registry; no pin is left
// without an entry; the names are unique.
func TestCatalogPins(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, e := range catalog {
		if seen[e.Name] {
			t.Errorf("%s twice", e.Name)
		}
		seen[e.Name] = true
		if e.Title == "" || e.launch == nil {
			t.Errorf("%s: no title or launch", e.Name)
		}
		if e.Remote() {
			if e.Package != "" || !strings.HasPrefix(e.URL, "https://") {
				t.Errorf("%s: remote with a package or without https", e.Name)
			}
			continue
		}
		pkg, lock, err := e.pinFiles()
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Dependencies map[string]string `json:"dependencies"`
		}
		if err := json.Unmarshal(pkg, &p); err != nil {
			t.Fatal(err)
		}
		v, err := e.Version()
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Dependencies) != 1 || p.Dependencies[e.Package] != v {
			t.Errorf("%s: package.json depends on %v, want exactly %s %s (as the lockfile pins)", e.Name, p.Dependencies, e.Package, v)
		}
		var l struct {
			LockfileVersion int `json:"lockfileVersion"`
			Packages        map[string]struct {
				Resolved, Integrity string
			} `json:"packages"`
		}
		if err := json.Unmarshal(lock, &l); err != nil {
			t.Fatal(err)
		}
		for name, dep := range l.Packages {
			if name != "" && (!strings.HasPrefix(dep.Integrity, "sha512-") || (dep.Resolved != "" && !strings.HasPrefix(dep.Resolved, "https://registry.npmjs.org/"))) {
				t.Errorf("%s: %s is not pinned by integrity from the registry (%q)", e.Name, name, dep.Resolved)
			}
		}
	}
	dirs, err := fs.ReadDir(lockfiles, "catalog")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if e, ok := Lookup(d.Name()); !ok || e.Remote() {
			t.Errorf("catalog/%s pins a server the catalog lacks", d.Name())
		}
	}
	if !slices.IsSorted(Names()) {
		t.Error("Names not sorted")
	}
}

// fakeNPM writes an npm that records its arguments and installs the
// catalog entry's executable, and returns it and the record's path.
func fakeNPM(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	rec := filepath.Join(dir, "calls")
	npm := filepath.Join(dir, "npm")
	script := `#!/bin/sh
echo "$PWD $*" >> ` + rec + `
test -f package-lock.json || { echo "no lockfile" >&2; exit 1; }
case "$PWD" in *sequentialthinking*) bin=mcp-server-sequential-thinking;; *memory*) bin=mcp-server-memory;; *) echo "ENOTCACHED" >&2; exit 1;; esac
mkdir -p node_modules/.bin && touch node_modules/.bin/$bin
`
	if err := os.WriteFile(npm, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return npm, rec
}

// TestPull: a pull checks every name first (one the catalog lacks fails
// it, named, before anything is installed), installs with `npm ci
// --offline` of the pinned lockfile without install scripts, leaves an
// installed server alone, and installs nothing for a remote one; a failed
// install leaves no half-made server behind.
func TestPull(t *testing.T) {
	t.Parallel()
	l := testLayout(t)
	npm, rec := fakeNPM(t)
	l.NPM = npm
	ctx := context.Background()
	var out bytes.Buffer
	err := Pull(ctx, l, []string{"memory", "nope", "github/a/b"}, &out)
	if err == nil || !strings.Contains(err.Error(), `server "nope": not in this gateway's catalog`) || !strings.Contains(err.Error(), `server "github/a/b": a repository server`) {
		t.Fatalf("pull with unknown names: %v", err)
	}
	if _, err := os.Stat(rec); err == nil {
		t.Fatal("npm ran although a name was unknown")
	}
	if err := Pull(ctx, l, []string{"memory", "astroDocs", "sequentialthinking"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"memory", "sequentialthinking"} {
		e, _ := Lookup(n)
		if !installed(l, e) {
			t.Errorf("%s not installed", n)
		}
		_, lock, _ := e.pinFiles()
		if have, _ := os.ReadFile(filepath.Join(l.serverDir(n), "package-lock.json")); !bytes.Equal(have, lock) {
			t.Errorf("%s: not the pinned lockfile", n)
		}
	}
	calls, _ := os.ReadFile(rec)
	if n := strings.Count(string(calls), "\n"); n != 2 {
		t.Fatalf("npm ran %d times:\n%s", n, calls)
	}
	for _, want := range []string{"ci --offline --cache " + l.npmCache(), "--ignore-scripts", "--omit=dev"} {
		if !strings.Contains(string(calls), want) {
			t.Errorf("npm calls lack %q:\n%s", want, calls)
		}
	}
	if !strings.Contains(out.String(), "astroDocs: a remote server") {
		t.Errorf("output:\n%s", out.String())
	}
	out.Reset()
	if err := Pull(ctx, l, []string{"memory"}, &out); err != nil || !strings.Contains(out.String(), "already installed") {
		t.Fatalf("second pull: %v %s", err, out.String())
	}
	if again, _ := os.ReadFile(rec); !bytes.Equal(again, calls) {
		t.Error("npm ran for a server installed already")
	}
	err = Pull(ctx, l, []string{"filesystem"}, &out)
	if err == nil || !strings.Contains(err.Error(), `server "filesystem": npm ci of @modelcontextprotocol/server-filesystem`) || !strings.Contains(err.Error(), "ENOTCACHED") {
		t.Fatalf("failed install: %v", err)
	}
	if _, err := os.Stat(l.serverDir("filesystem")); err == nil {
		t.Error("a failed install left its directory")
	}
	if m, _ := filepath.Glob(l.serverDir("*") + ".pull"); len(m) > 0 {
		t.Errorf("left behind: %q", m)
	}
}

// TestPrepareImage: every npm server is installed once (filling npm's
// cache), those not preinstalled are removed again; a second run with the
// trees and the cache kept installs nothing.
func TestPrepareImage(t *testing.T) {
	t.Parallel()
	l := testLayout(t)
	dir := t.TempDir()
	npm := filepath.Join(dir, "npm")
	script := "#!/bin/sh\necho \"$*\" >> " + filepath.Join(dir, "calls") + "\n" +
		"mkdir -p node_modules/.bin && for b in mcp-server-filesystem mcp-server-memory mcp-server-everything mcp-server-sequential-thinking; do touch node_modules/.bin/$b; done\n"
	if err := os.WriteFile(npm, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	l.NPM = npm
	var out bytes.Buffer
	if err := PrepareImage(context.Background(), l, &out); err != nil {
		t.Fatal(err)
	}
	for _, e := range Catalog() {
		if e.Remote() {
			continue
		}
		_, err := os.Stat(l.serverDir(e.Name))
		if e.Preinstalled != (err == nil) {
			t.Errorf("%s: preinstalled %v, directory: %v", e.Name, e.Preinstalled, err)
		}
	}
	calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
	if strings.Count(string(calls), "--prefer-offline") != 4 || strings.Contains(string(calls), "--offline ") {
		t.Errorf("npm calls:\n%s", calls)
	}
	if err := PrepareImage(context.Background(), l, &out); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "calls")); !bytes.Equal(again, calls) {
		t.Errorf("a second run called npm:\n%s", again)
	}
}
