package e2b

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/envd/envdtest"
)

// TestFiles writes and reads bytes and streams, lists, stats, makes
// directories, renames and removes, with the errors of missing paths.
func TestFiles(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()
	dir := t.TempDir()
	a := filepath.Join(dir, "sub", "a.txt")

	info, err := sb.Files.Write(ctx, a, []byte("hello"), FileOptions{})
	if err != nil || info.Path != a || info.Type != TypeFile {
		t.Fatalf("write: %+v %v", info, err)
	}
	if data, err := sb.Files.Read(ctx, a, FileOptions{}); err != nil || string(data) != "hello" {
		t.Fatalf("read: %q %v", data, err)
	}
	big := strings.Repeat("0123456789", 100_000)
	if _, err := sb.Files.WriteStream(ctx, filepath.Join(dir, "big"), strings.NewReader(big), FileOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := sb.Files.ReadStream(ctx, filepath.Join(dir, "big"), FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(data) != big {
		t.Fatalf("stream round trip: %d bytes, %v", len(data), err)
	}
	infos, err := sb.Files.WriteMany(ctx, []WriteEntry{{Path: filepath.Join(dir, "m1"), Data: []byte("1")}, {Path: filepath.Join(dir, "m2"), Data: []byte("2")}}, FileOptions{})
	if err != nil || len(infos) != 2 {
		t.Fatalf("write many: %+v %v", infos, err)
	}
	if data, _ := sb.Files.Read(ctx, filepath.Join(dir, "m2"), FileOptions{}); string(data) != "2" {
		t.Fatalf("m2 = %q", data)
	}

	entries, err := sb.Files.List(ctx, dir, ListDirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name+":"+string(e.Type))
	}
	slices.Sort(names)
	if want := []string{"big:file", "m1:file", "m2:file", "sub:dir"}; !slices.Equal(names, want) {
		t.Fatalf("list %v, want %v", names, want)
	}
	if deep, err := sb.Files.List(ctx, dir, ListDirOptions{Depth: 2}); err != nil || len(deep) != 5 {
		t.Fatalf("depth 2: %d entries, %v", len(deep), err)
	}

	st, err := sb.Files.Stat(ctx, a, FileOptions{})
	if err != nil || st.Size != 5 || st.Type != TypeFile || st.Mode.Perm() == 0 || st.ModifiedTime.IsZero() || st.Owner != "root" {
		t.Fatalf("stat: %+v %v", st, err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := sb.Files.Stat(ctx, missing, FileOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat missing: %v", err)
	}
	if _, err := sb.Files.Read(ctx, missing, FileOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("read missing: %v", err)
	}
	var ee *EnvdError
	if _, err := sb.Files.Read(ctx, dir, FileOptions{}); !errors.As(err, &ee) || ee.Status != http.StatusBadRequest {
		t.Fatalf("read a directory: %v", err)
	}
	if ok, err := sb.Files.Exists(ctx, a, FileOptions{}); !ok || err != nil {
		t.Fatalf("exists: %v %v", ok, err)
	}
	if ok, err := sb.Files.Exists(ctx, missing, FileOptions{}); ok || err != nil {
		t.Fatalf("exists missing: %v %v", ok, err)
	}

	nd := filepath.Join(dir, "x", "y")
	if ok, err := sb.Files.MakeDir(ctx, nd, FileOptions{}); !ok || err != nil {
		t.Fatalf("mkdir: %v %v", ok, err)
	}
	if ok, err := sb.Files.MakeDir(ctx, nd, FileOptions{}); ok || err != nil {
		t.Fatalf("mkdir again: %v %v, want false", ok, err)
	}
	moved, err := sb.Files.Rename(ctx, a, filepath.Join(nd, "b.txt"), FileOptions{})
	if err != nil || moved.Name != "b.txt" {
		t.Fatalf("rename: %+v %v", moved, err)
	}
	if ok, _ := sb.Files.Exists(ctx, a, FileOptions{}); ok {
		t.Fatal("old name still exists")
	}
	if err := sb.Files.Remove(ctx, filepath.Join(dir, "x"), FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := sb.Files.Exists(ctx, nd, FileOptions{}); ok {
		t.Fatal("removed directory still exists")
	}
}

// TestFilesUser writes as another user: the file is theirs; an unknown
// user is refused.
func TestFilesUser(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "owned")
	if _, err := sb.Files.Write(ctx, p, []byte("x"), FileOptions{User: "nobody"}); err != nil {
		t.Fatal(err)
	}
	if st, err := sb.Files.Stat(ctx, p, FileOptions{}); err != nil || st.Owner != "nobody" {
		t.Fatalf("owner of a file nobody wrote: %+v %v", st, err)
	}
	if _, err := sb.Files.Write(ctx, p, []byte("x"), FileOptions{User: "no-such-user-here"}); err == nil {
		t.Fatal("unknown user accepted")
	}
}

// TestFileMetadata stores metadata with a written file; Stat returns it.
func TestFileMetadata(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "meta.txt")
	info, err := sb.Files.Write(ctx, p, []byte("x"), FileOptions{Metadata: map[string]string{"owner-team": "blue"}})
	var ee *EnvdError
	if errors.As(err, &ee) && strings.Contains(ee.Message, "extended attributes") {
		envdtest.Require(t, false, "user xattrs unsupported here")
	}
	if err != nil || info.Metadata["owner-team"] != "blue" {
		t.Fatalf("write: %+v %v", info, err)
	}
	if st, err := sb.Files.Stat(ctx, p, FileOptions{}); err != nil || st.Metadata["owner-team"] != "blue" {
		t.Fatalf("stat: %+v %v", st, err)
	}
}

// TestSignedURLs fetches and uploads through signed URLs with no access
// token, as a browser would; a tampered or expired signature is refused.
func TestSignedURLs(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "signed.txt")
	if _, err := sb.Files.Write(ctx, p, []byte("signed"), FileOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func(u string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("E2b-Sandbox-Id", sb.ID)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get(sb.Files.DownloadURL(p, URLOptions{})); status != 200 || body != "signed" {
		t.Fatalf("download: %d %q", status, body)
	}
	if status, body := get(sb.Files.DownloadURL(p, URLOptions{Expires: time.Now().Add(time.Hour)})); status != 200 || body != "signed" {
		t.Fatalf("download with expiry: %d %q", status, body)
	}
	if status, _ := get(sb.Files.DownloadURL(p, URLOptions{Expires: time.Now().Add(-time.Hour)})); status != 401 {
		t.Fatalf("expired download: %d, want 401", status)
	}
	if status, _ := get(strings.Replace(sb.Files.DownloadURL(p, URLOptions{}), "signature=v1_", "signature=v1_A", 1)); status != 401 {
		t.Fatalf("tampered download: %d, want 401", status)
	}
	if status, _ := get(sb.Files.UploadURL(p, URLOptions{})); status != 401 {
		t.Fatalf("write signature used to read: %d, want 401", status)
	}
}

// TestWatch reports changes below a directory on the channel, and closes
// it on Stop.
func TestWatch(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()
	dir := t.TempDir()
	w, err := sb.Files.Watch(ctx, dir, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files.Write(ctx, filepath.Join(dir, "new.txt"), []byte("x"), FileOptions{}); err != nil {
		t.Fatal(err)
	}
	ev, ok := <-w.Events
	if !ok || ev.Name != "new.txt" || (ev.Type != EventCreate && ev.Type != EventWrite) {
		t.Fatalf("event %+v open %v, err %v", ev, ok, w.Err())
	}
	w.Stop()
	for range w.Events {
	}
	if w.Err() != nil {
		t.Fatalf("stopped watch error %v", w.Err())
	}
	if _, err := sb.Files.Watch(ctx, filepath.Join(dir, "missing"), WatchOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("watch a missing dir: %v", err)
	}
}

// TestPty runs a shell on a terminal, types into it and resizes it.
func TestPty(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()
	var out syncBuffer
	h, err := sb.Pty.Create(ctx, PtyOptions{Cols: 80, Rows: 24, Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Pty.Resize(ctx, h.PID, 100, 30); err != nil {
		t.Fatal(err)
	}
	if err := sb.Pty.SendInput(ctx, h.PID, []byte("stty size; echo $((6*7))\nexit 0\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Wait(ctx); err != nil {
		t.Fatalf("pty end: %v; output %q", err, out.String())
	}
	if s := out.String(); !strings.Contains(s, "30 100") || !strings.Contains(s, "42") {
		t.Fatalf("pty output %q", s)
	}
}
