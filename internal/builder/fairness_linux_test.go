package builder

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// diskBytes sums the sizes of the regular files under dir.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error { //nolint:errcheck
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// TestFairnessParallelUploads: a team's uploads count against its quota
// while they stream, so parallel uploads never hold more of the host's
// disk than the team's quota, even before any of them ends; an upload
// that declares a Content-Length over what is left is refused before a
// byte is read; another team's upload is not affected.
func TestFairnessParallelUploads(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := t.Context()
	const quota, each, parallel = 1 << 20, 600 << 10, 4
	f := newFixture(t, tinyRootFS(t))
	svc, err := NewService(ServiceConfig{Builder: f.b, MaxTeamUploadBytes: quota})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.cancel)
	tplA, _, err := svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-a", Name: "par-a"})
	if err != nil {
		t.Fatal(err)
	}
	tplB, _, err := svc.CreateTemplate(ctx, templates.CreateRequest{TeamID: "team-b", Name: "par-b"})
	if err != nil {
		t.Fatal(err)
	}
	// A body PutFiles takes as a gzip'd tar (it checks the magic only),
	// of random bytes that no compression shrinks.
	body := make([]byte, each)
	rand.Read(body)
	body[0], body[1] = 0x1f, 0x8b

	results := make(chan error, parallel)
	written := make(chan error, parallel)
	var writers []*io.PipeWriter
	for i := range parallel {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		hash := strings.Repeat(string(rune('a'+i)), 64)
		go func() {
			err := svc.PutFiles(ctx, tplA.ID, hash, pr)
			pr.CloseWithError(fmt.Errorf("upload ended: %v", err))
			results <- err
		}()
		go func() {
			_, err := pw.Write(body)
			if err == nil {
				// Once this byte is read, the body before it is on disk.
				_, err = pw.Write([]byte{0})
			}
			written <- err
		}()
	}
	open := 0
	for range parallel {
		if err := <-written; err == nil {
			open++
		}
	}
	if n := diskBytes(t, f.b.cfg.DataDir); n > quota {
		t.Errorf("%d parallel uploads of one team (%d open) hold %d bytes of disk, more than its quota of %d", parallel, open, n, quota)
	}
	for _, pw := range writers {
		pw.Close()
	}
	stored := 0
	for range parallel {
		switch err := <-results; {
		case err == nil:
			stored++
		case !errdefs.IsExhausted(err):
			t.Errorf("an upload over the quota failed with %v, want exhausted", err)
		}
	}
	if stored != 1 {
		t.Errorf("%d of %d uploads of %d bytes stored under a quota of %d, want 1", stored, parallel, each, quota)
	}
	if n, size, err := svc.teamUploads(ctx, "team-a"); err != nil || size > quota {
		t.Errorf("team A keeps %d uploads of %d bytes (%v), more than its quota", n, size, err)
	}

	// Declared sizes are checked before anything is read: a second upload
	// of team A does not fit what is left, team B's does.
	mux := http.NewServeMux()
	mux.Handle(UploadPathPrefix, svc.UploadHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	_, path, err := svc.Files(ctx, "team-a", tplA.ID, strings.Repeat("f", 64))
	if err != nil {
		t.Fatal(err)
	}
	// A body that never comes: only a check of the declared size answers.
	pr, pw := io.Pipe()
	defer pw.Close()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodPut, srv.URL+path, pr)
	req.ContentLength = each
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("upload declaring %d bytes over team A's quota: %v, want a 429 before the body", each, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("upload declaring %d bytes over team A's quota: %d, want 429", each, resp.StatusCode)
	}
	_, path, err = svc.Files(ctx, "team-b", tplB.ID, strings.Repeat("f", 64))
	if err != nil {
		t.Fatal(err)
	}
	if code := put(t, srv.URL+path, body); code != http.StatusCreated {
		t.Errorf("team B's upload of %d bytes: %d, want 201", len(body), code)
	}
}
