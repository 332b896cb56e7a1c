package e2b

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGzipFiles writes and reads with gzip on the wire both ways: envd
// receives Content-Encoding gzip and octet-stream, answers a gzip body,
// and the content round-trips.
func TestGzipFiles(t *testing.T) {
	t.Parallel()
	api, sb := startSandbox(t)
	ctx := context.Background()
	dir := t.TempDir()
	content := bytes.Repeat([]byte("compressible "), 10_000)
	if _, err := sb.Files.Write(ctx, filepath.Join(dir, "a"), content, FileOptions{Gzip: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files.WriteStream(ctx, filepath.Join(dir, "b"), bytes.NewReader(content), FileOptions{Gzip: true}); err != nil {
		t.Fatal(err)
	}
	infos, err := sb.Files.WriteMany(ctx, []WriteEntry{{Path: filepath.Join(dir, "c"), Data: []byte("c")}, {Path: filepath.Join(dir, "d"), Data: []byte("dd")}}, FileOptions{Gzip: true})
	if err != nil || len(infos) != 2 || infos[1].Name != "d" {
		t.Fatalf("write many: %+v %v", infos, err)
	}
	for _, name := range []string{"a", "b"} {
		got, err := sb.Files.Read(ctx, filepath.Join(dir, name), FileOptions{Gzip: true})
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("read %s: %d bytes, %v", name, len(got), err)
		}
	}
	if got, err := sb.Files.Read(ctx, filepath.Join(dir, "d"), FileOptions{}); err != nil || string(got) != "dd" {
		t.Fatalf("read d: %q %v", got, err)
	}
	var posts, gets int
	for _, r := range api.requests("/files") {
		switch r.Method {
		case "POST":
			posts++
			if r.ContentEncoding != "gzip" || r.ContentType != "application/octet-stream" {
				t.Errorf("gzip upload sent %+v", r)
			}
		case "GET":
			gets++
			if want := map[bool]string{true: "gzip", false: "identity"}[gets <= 2]; r.AcceptEncoding != want {
				t.Errorf("read %d sent Accept-Encoding %q, want %q", gets, r.AcceptEncoding, want)
			}
		}
	}
	if posts != 4 || gets != 3 {
		t.Fatalf("%d uploads and %d reads reached envd, want 4 and 3", posts, gets)
	}
}

// TestEnvdVersionGates: against an envd older than a feature, the SDK
// refuses it with an *EnvdVersionError before any request, or falls back
// as the other SDKs do (multipart uploads, the "user" user).
func TestEnvdVersionGates(t *testing.T) {
	t.Parallel()
	api, cfg := newServer(t)
	api.envdVersion = "0.1.0"
	sb, err := Create(context.Background(), CreateOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	watch := func(o WatchOptions) error {
		w, err := sb.Files.Watch(ctx, dir, o)
		if err == nil {
			w.Stop()
		}
		return err
	}
	refused := []struct {
		name     string
		call     func() error
		required string
	}{
		{"recursive watch", func() error { return watch(WatchOptions{Recursive: true}) }, envdRecursiveWatch},
		{"include entry", func() error { return watch(WatchOptions{IncludeEntry: true}) }, envdEntryInfo},
		{"network mounts", func() error {
			w, err := sb.Files.WatchPolling(ctx, dir, WatchOptions{AllowNetworkMounts: true})
			if err == nil {
				w.Stop(ctx)
			}
			return err
		}, envdNetworkMounts},
		{"metadata", func() error {
			_, err := sb.Files.Write(ctx, filepath.Join(dir, "m"), nil, FileOptions{Metadata: map[string]string{"k": "v"}})
			return err
		}, envdFileMetadata},
		{"close stdin", func() error { return sb.Commands.CloseStdin(ctx, 1) }, envdCloseStdin},
		{"metrics", func() error { _, err := sb.Metrics(ctx, MetricsOptions{}); return err }, envdMetrics},
	}
	for _, tc := range refused {
		before := api.envdCount()
		err := tc.call()
		var ve *EnvdVersionError
		if !errors.As(err, &ve) || ve.Required != tc.required || ve.Version != "0.1.0" {
			t.Errorf("%s on envd 0.1.0: %v, want an EnvdVersionError for %s", tc.name, err, tc.required)
		}
		if after := api.envdCount(); after != before {
			t.Errorf("%s: a refused call reached envd", tc.name)
		}
	}

	// Fallbacks: a gzip write and a stream go as multipart, unencoded;
	// the user is named "user" where envd has no default of its own.
	p, q := filepath.Join(dir, "f"), filepath.Join(dir, "g")
	root := FileOptions{Gzip: true, User: "root"}
	if _, err := sb.Files.Write(ctx, p, []byte("x"), root); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files.WriteStream(ctx, q, strings.NewReader("streamed"), root); err != nil {
		t.Fatal(err)
	}
	if got, err := sb.Files.Read(ctx, q, root); err != nil || string(got) != "streamed" {
		t.Fatalf("multipart stream fallback: %q %v", got, err)
	}
	_, _ = sb.Files.Stat(ctx, p, FileOptions{}) // as "user", who need not exist here
	_, _ = sb.Files.Stat(ctx, p, FileOptions{User: "root"})
	posts := slices.DeleteFunc(api.requests("/files"), func(r envdReq) bool { return r.Method != "POST" })
	if len(posts) != 2 {
		t.Fatalf("%d uploads reached envd, want 2", len(posts))
	}
	for _, r := range posts {
		if r.ContentEncoding != "" || !strings.HasPrefix(r.ContentType, "multipart/form-data") || r.Username != "root" {
			t.Errorf("upload to envd 0.1.0 sent %+v", r)
		}
	}
	_, _ = sb.Files.Write(ctx, p, []byte("x"), FileOptions{}) // as "user", who need not exist here
	if !slices.ContainsFunc(api.requests("/files"), func(r envdReq) bool { return r.Method == "POST" && r.Username == "user" }) {
		t.Error(`a write without a user to envd 0.1.0 did not name "user"`)
	}
	stats := api.requests("/filesystem.Filesystem/Stat")
	if len(stats) != 2 || stats[0].Authorization != "Basic dXNlcjo=" || stats[1].Authorization != "Basic cm9vdDo=" {
		t.Fatalf("stat on envd 0.1.0 sent %+v, want user then root", stats)
	}
}

// TestCreateRefusesAncientEnvd: a sandbox whose envd predates the
// protocol the SDK speaks is killed and Create fails, as in the other SDKs.
func TestCreateRefusesAncientEnvd(t *testing.T) {
	t.Parallel()
	api, cfg := newServer(t)
	api.envdVersion = "0.0.9"
	_, err := Create(context.Background(), CreateOptions{Config: cfg})
	var ve *EnvdVersionError
	if !errors.As(err, &ve) || ve.Required != envdSDK {
		t.Fatalf("create with envd 0.0.9: %v", err)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.creates) != 1 || len(api.sandboxes) != 0 {
		t.Fatalf("%d creates, %d sandboxes left; want the one created killed", len(api.creates), len(api.sandboxes))
	}
}

// TestCurrentEnvdSendsNoUser: an envd with a default user gets no user
// unless one is asked for.
func TestCurrentEnvdSendsNoUser(t *testing.T) {
	t.Parallel()
	api, sb := startSandbox(t)
	p := filepath.Join(t.TempDir(), "f")
	if _, err := sb.Files.Write(context.Background(), p, []byte("x"), FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files.Stat(context.Background(), p, FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := api.requests("/filesystem.Filesystem/Stat"); len(r) != 1 || r[0].Authorization != "" {
		t.Fatalf("stat sent %+v", r)
	}
	if r := api.requests("/files"); len(r) != 1 || r[0].Username != "" {
		t.Fatalf("write sent %+v", r)
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		have, min string
		want      bool
	}{
		{"0.6.4", "0.6.3", true}, {"0.6.3", "0.6.3", true}, {"0.6.2", "0.6.3", false},
		{"0.10.0", "0.6.3", true}, {"1.0.0", "0.6.3", true}, {"v0.5.7", "0.5.7", true},
		{"0.5.6-rc1", "0.5.7", false}, {"", "0.6.3", true}, {"garbage", "0.6.3", true},
	} {
		if got := (&envd{version: tc.have}).supports(tc.min); got != tc.want {
			t.Errorf("%q supports %s = %v, want %v", tc.have, tc.min, got, tc.want)
		}
	}
}

// TestWatchIncludeEntry attaches the entry of a created file to its event.
func TestWatchIncludeEntry(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()
	dir := t.TempDir()
	w, err := sb.Files.Watch(ctx, dir, WatchOptions{IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := sb.Files.Write(ctx, filepath.Join(dir, "e.txt"), []byte("12345"), FileOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range w.Events {
		if ev.Name != "e.txt" {
			continue
		}
		if ev.Entry == nil || ev.Entry.Name != "e.txt" || ev.Entry.Type != TypeFile || ev.Entry.Path != filepath.Join(dir, "e.txt") {
			t.Fatalf("event %+v entry %+v", ev, ev.Entry)
		}
		return
	}
	t.Fatalf("watch ended: %v", w.Err())
}

// TestWatchPolling collects changes in envd between calls: a first call
// returns what happened since the start, the next only what came after,
// and a stopped watcher refuses to be read.
func TestWatchPolling(t *testing.T) {
	t.Parallel()
	_, sb := startSandbox(t)
	ctx := context.Background()
	dir := t.TempDir()
	w, err := sb.Files.WatchPolling(ctx, dir, WatchOptions{Recursive: true, IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files.MakeDir(ctx, filepath.Join(dir, "sub"), FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Files.Write(ctx, filepath.Join(dir, "sub", "one"), []byte("1"), FileOptions{}); err != nil {
		t.Fatal(err)
	}
	names := func(evs []FilesystemEvent) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Name)
		}
		return out
	}
	// Events come from inotify asynchronously: poll until the write shows.
	// A generous bound, not a timing: only a missing event reaches it.
	deadline := time.Now().Add(time.Minute)
	var seen []FilesystemEvent
	for !slices.Contains(names(seen), filepath.Join("sub", "one")) {
		evs, err := w.NewEvents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, evs...)
		if time.Now().After(deadline) {
			t.Fatalf("no event of sub/one: %v", names(seen))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Contains(names(seen), "sub") {
		t.Fatalf("events %v lack the directory", names(seen))
	}
	for _, e := range seen {
		if e.Entry == nil {
			t.Fatalf("event %+v without its entry", e)
		}
	}
	if err := sb.Files.Remove(ctx, filepath.Join(dir, "sub", "one"), FileOptions{}); err != nil {
		t.Fatal(err)
	}
	var removed []FilesystemEvent
	for len(removed) == 0 {
		evs, err := w.NewEvents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		removed = append(removed, evs...)
		if time.Now().After(deadline) {
			t.Fatal("no event of the remove")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if removed[0].Name != filepath.Join("sub", "one") || removed[0].Type != EventRemove {
		t.Fatalf("after the first events, got %+v, want only the remove", removed)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.NewEvents(ctx); !errors.Is(err, ErrWatcherStopped) {
		t.Fatalf("events after stop: %v", err)
	}
	if _, err := sb.Files.WatchPolling(ctx, filepath.Join(dir, "missing"), WatchOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("polling watch of a missing dir: %v", err)
	}
}

// TestListFilters sends startedAfter in the server's format: only the
// sandboxes started after it are listed.
func TestListFilters(t *testing.T) {
	t.Parallel()
	_, cfg := newServer(t)
	ctx := context.Background()
	first, err := Create(ctx, CreateOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	info, err := first.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Create(ctx, CreateOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	list, _, err := List(ctx, ListOptions{Config: cfg, StartedAfter: info.StartedAt})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].SandboxID != second.ID {
		t.Fatalf("started after the first: %+v, want only %s", list, second.ID)
	}
}
