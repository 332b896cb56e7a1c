package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/warren-sandbox/warren/pkg/client"
	"github.com/warren-sandbox/warren/pkg/client/buildcontext"
)

// fakeBuilds plays the template build API: it keeps the uploads by hash
// and the started build's steps, and ends every build ready.
type fakeBuilds struct {
	mu      sync.Mutex
	url     string
	creates int
	uploads map[string][]byte // by hash
	asked   []string          // hashes asked for
	started client.TemplateBuild
}

func newFakeBuilds(t *testing.T) (*fakeBuilds, Config) {
	f := &fakeBuilds{uploads: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v3/templates", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.creates++
		f.mu.Unlock()
		writeJSON(w, 202, client.TemplateCreated{TemplateID: "tpl1", BuildID: "b1"})
	})
	mux.HandleFunc("GET /templates/tpl1/files/{hash}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		h := r.PathValue("hash")
		f.asked = append(f.asked, h)
		if _, ok := f.uploads[h]; ok {
			writeJSON(w, 200, client.FilesUpload{Present: true})
			return
		}
		writeJSON(w, 201, client.FilesUpload{URL: f.url + "/upload/" + h})
	})
	mux.HandleFunc("PUT /upload/{hash}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != "" {
			t.Error("the API key went to the upload URL")
		}
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.uploads[r.PathValue("hash")] = b
		f.mu.Unlock()
	})
	mux.HandleFunc("POST /v2/templates/tpl1/builds/b1", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		json.NewDecoder(r.Body).Decode(&f.started)
		w.WriteHeader(202)
	})
	mux.HandleFunc("GET /templates/tpl1/builds/b1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, client.TemplateBuildInfo{TemplateID: "tpl1", BuildID: "b1", Status: client.BuildReady, LogEntries: []client.BuildLogEntry{}})
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	f.url = hs.URL
	return f, Config{APIKey: testKey, APIURL: hs.URL}
}

func tarNames(t *testing.T, data []byte) map[string]string {
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
		b, _ := io.ReadAll(tr)
		out[hdr.Name] = string(b) + hdr.Linkname
	}
}

// TestBuildTemplateCopy uploads the files of each COPY step once, under
// the hash sent with the step, before the build starts; a second build
// of the same files finds them on the server.
func TestBuildTemplateCopy(t *testing.T) {
	t.Parallel()
	f, cfg := newFakeBuilds(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "app", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "app", "main.py"), []byte("print(42)\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "app", "sub", "x"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "app", "skip.log"), []byte("no"), 0o644)
	os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte("*.log\n**/*.log\n"), 0o644)
	o := TemplateOptions{Config: cfg, Name: "copy", ContextDir: dir,
		Steps: []TemplateStep{StepCopy("app", "/opt/app", "user", "0755"), StepRun("true"), StepCopy("app", "/opt/app", "user", "0755")}}
	if _, err := BuildTemplate(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	steps := f.started.Steps
	hash := steps[0].FilesHash
	if len(steps) != 3 || hash == "" || steps[2].FilesHash != hash || steps[1].FilesHash != "" {
		t.Fatalf("started steps %+v", steps)
	}
	if got := steps[0].Args; len(got) != 4 || got[2] != "user" || got[3] != "0755" {
		t.Fatalf("COPY args %q", got)
	}
	if len(f.uploads) != 1 || len(f.asked) != 1 {
		t.Fatalf("%d uploads, asked for %v; want one of each", len(f.uploads), f.asked)
	}
	names := tarNames(t, f.uploads[hash])
	f.mu.Unlock()
	if names["app/main.py"] != "print(42)\n" || names["app/sub/x"] != "x" || len(names) != 4 {
		t.Fatalf("uploaded archive %v, want app/, app/main.py, app/sub/, app/sub/x", names)
	}
	if o.Steps[0].FilesHash != "" {
		t.Fatal("BuildTemplate changed the caller's steps")
	}
	if _, err := BuildTemplate(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.uploads) != 1 || len(f.asked) != 2 {
		t.Fatalf("rebuild: %d uploads, asked %v", len(f.uploads), f.asked)
	}
}

// TestBuildTemplateCopyEscape: COPY through a symlink out of the build
// context fails before a template is created; a "../" source stays in
// the context.
func TestBuildTemplateCopyEscape(t *testing.T) {
	t.Parallel()
	f, cfg := newFakeBuilds(t)
	dir := t.TempDir()
	os.Symlink("/etc", filepath.Join(dir, "etclink"))
	for _, src := range []string{"etclink/passwd", "../../../../etc/passwd"} {
		_, err := BuildTemplate(context.Background(), TemplateOptions{Config: cfg, Name: "escape", ContextDir: dir,
			Steps: []TemplateStep{StepCopy(src, "/x")}})
		if !errors.Is(err, buildcontext.ErrInvalid) {
			t.Errorf("COPY %s: %v, want buildcontext.ErrInvalid", src, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.creates != 0 || len(f.uploads) != 0 {
		t.Fatalf("%d templates created, %d uploads after refused sources", f.creates, len(f.uploads))
	}
}
