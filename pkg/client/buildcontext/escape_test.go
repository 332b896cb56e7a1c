package buildcontext

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/pkg/client"
)

// untar returns the entries of a gzip'd tar: name to content, or to
// "->target" for a link.
func untar(t *testing.T, data []byte) map[string]string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch hdr.Typeflag {
		case tar.TypeSymlink:
			out[hdr.Name] = "->" + hdr.Linkname
		default:
			b, _ := io.ReadAll(tr)
			out[hdr.Name] = string(b)
		}
	}
}

// TestNoEscape is the attack on the build context: symlinks to /etc and
// /etc/passwd and "../" sources. No byte of a file outside the context
// reaches the archive: a symlink goes as a link, a path through a link
// that leaves the context is refused, "../" stays inside.
func TestNoEscape(t *testing.T) {
	t.Parallel()
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil || len(passwd) == 0 {
		t.Fatalf("this test needs /etc/passwd: %v", err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"app/x.txt": "x", "etclink": "->/etc", "passwd": "->/etc/passwd", "up": "->../..", "inner": "->app",
	})
	bc := open(t, dir)

	for _, src := range []string{"etclink/passwd", "etclink/pass*", "etclink/*", "up/etc/passwd", "up/*/passwd"} {
		files, err := bc.Files(src)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Files(%q) = %d files, %v; want ErrInvalid", src, len(files), err)
		}
	}
	for _, src := range []string{"../../../../etc/passwd", "/etc/passwd", "../etc/*"} {
		if _, err := bc.Files(src); err == nil || !strings.Contains(err.Error(), "no such file in the build context") {
			t.Errorf("Files(%q): %v, want no such file (the source stays in the context)", src, err)
		}
	}
	steps := []client.TemplateStep{{Type: "COPY", Args: []string{"etclink/passwd", "/x"}}}
	if _, err := bc.Prepare(steps, nil); !errors.Is(err, ErrInvalid) || steps[0].FilesHash != "" {
		t.Errorf("Prepare of COPY etclink/passwd: %v, hash %q", err, steps[0].FilesHash)
	}

	// The whole context, and the links named alone: links, not content.
	for _, src := range []string{".", "passwd", "../passwd", "etclink", "up"} {
		files, err := bc.Files(src)
		if err != nil {
			t.Fatalf("Files(%q): %v", src, err)
		}
		var buf bytes.Buffer
		if err := bc.WriteTarGz(&buf, files); err != nil {
			t.Fatalf("archive of %q: %v", src, err)
		}
		entries := untar(t, buf.Bytes())
		for name, content := range entries {
			if strings.HasPrefix(name, "etclink/") || strings.HasPrefix(name, "up/") || strings.HasPrefix(name, "inner/") {
				t.Errorf("archive of %q went through a link: %s", src, name)
			}
			if !strings.HasPrefix(content, "->") && len(content) > 0 && bytes.Contains(passwd, []byte(content)) && content != "x" {
				t.Errorf("archive of %q holds /etc/passwd's content in %s", src, name)
			}
		}
		if src == "." && (entries["passwd"] != "->/etc/passwd" || entries["etclink"] != "->/etc" || entries["app/x.txt"] != "x") {
			t.Errorf("archive of the context: %v", entries)
		}
	}

	// A link inside the context is followed on the way to a file.
	files, err := bc.Files("inner/x.txt")
	if err != nil || len(files) != 1 || !files[0].Info.Mode().IsRegular() {
		t.Fatalf("inner/x.txt: %v %v", files, err)
	}
}

// TestSwapToSymlink: a directory replaced by a link out of the context
// after its files were listed fails the archive instead of reading
// through the link.
func TestSwapToSymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"app/passwd": "mine"})
	bc := open(t, dir)
	files, err := bc.Files("app")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "app")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "app")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := bc.WriteTarGz(&buf, files); err == nil {
		t.Fatalf("archive through a swapped link: no error; entries %v", untar(t, buf.Bytes()))
	}
	if _, err := bc.Hash("COPY", "app", "/x", files); err == nil {
		t.Fatal("hash through a swapped link: no error")
	}
}
