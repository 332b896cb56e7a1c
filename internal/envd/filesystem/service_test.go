package filesystem

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/warren-sandbox/warren/api/envd/filesystem"
	"github.com/warren-sandbox/warren/api/envd/filesystem/filesystemconnect"
	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/envd/envdtest"
	"github.com/warren-sandbox/warren/internal/envd/state"
	"github.com/warren-sandbox/warren/internal/testenv"
)

func newClient(t *testing.T) filesystemconnect.FilesystemClient {
	t.Helper()
	st := state.New(nil)
	if os.Geteuid() == 0 {
		root := "root"
		st.Apply(state.Update{DefaultUser: &root})
	} else {
		cur := os.Getenv("USER")
		st.Apply(state.Update{DefaultUser: &cur})
	}
	svc := NewService(testenv.Logger(t), auth.New(st), st)
	t.Cleanup(svc.Close)
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON())
}

func as[T any](user string, msg *T) *connect.Request[T] {
	r := connect.NewRequest(msg)
	if user != "" {
		r.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	return r
}

func TestStatListMakeMoveRemove(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}

	st, err := c.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: filepath.Join(dir, "a.txt")}))
	if err != nil {
		t.Fatal(err)
	}
	e := st.Msg.GetEntry()
	if e.GetName() != "a.txt" || e.GetType() != pb.FileType_FILE_TYPE_FILE || e.GetSize() != 5 || e.GetMode() != 0o640 ||
		e.GetPermissions() != "-rw-r-----" || e.GetOwner() == "" || e.GetGroup() == "" || e.GetModifiedTime() == nil {
		t.Fatalf("entry %v", e)
	}
	ln, err := c.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: filepath.Join(dir, "link")}))
	if err != nil || ln.Msg.GetEntry().GetType() != pb.FileType_FILE_TYPE_SYMLINK || ln.Msg.GetEntry().GetSymlinkTarget() != filepath.Join(dir, "a.txt") {
		t.Fatalf("symlink entry %v %v", ln, err)
	}

	mk, err := c.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: filepath.Join(dir, "x/y/z")}))
	if err != nil || mk.Msg.GetEntry().GetType() != pb.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("makedir: %v %v", mk, err)
	}
	if _, err := c.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: filepath.Join(dir, "x/y/z")})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("makedir twice: %v", err)
	}

	ls, err := c.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: dir, Depth: 1}))
	if err != nil || len(ls.Msg.GetEntries()) != 3 {
		t.Fatalf("list depth 1: %v %v", ls, err)
	}
	ls, err = c.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: dir, Depth: 3}))
	if err != nil || len(ls.Msg.GetEntries()) != 5 {
		t.Fatalf("list depth 3: %d entries, %v", len(ls.Msg.GetEntries()), err)
	}

	mv, err := c.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: filepath.Join(dir, "a.txt"), Destination: filepath.Join(dir, "new/b.txt")}))
	if err != nil || mv.Msg.GetEntry().GetPath() != filepath.Join(dir, "new/b.txt") {
		t.Fatalf("move: %v %v", mv, err)
	}
	if _, err := c.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: filepath.Join(dir, "x")})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatalf("x still there: %v", err)
	}
	if _, err := c.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: filepath.Join(dir, "never")})); err != nil {
		t.Fatalf("remove missing: %v", err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func() error
		code connect.Code
	}{
		{"stat missing", func() error {
			_, err := c.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: "/nope/none"}))
			return err
		}, connect.CodeNotFound},
		{"list missing", func() error {
			_, err := c.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: "/nope/none"}))
			return err
		}, connect.CodeNotFound},
		{"list a file", func() error { _, err := c.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: file})); return err }, connect.CodeInvalidArgument},
		{"makedir over file", func() error { _, err := c.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: file})); return err }, connect.CodeInvalidArgument},
		{"move missing", func() error {
			_, err := c.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: filepath.Join(dir, "none"), Destination: filepath.Join(dir, "d")}))
			return err
		}, connect.CodeNotFound},
		{"unknown user", func() error { _, err := c.Stat(ctx, as("no-such-user-xyz", &pb.StatRequest{Path: "/"})); return err }, connect.CodeUnauthenticated},
		{"watch a file", func() error {
			_, err := c.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: file}))
			return err
		}, connect.CodeInvalidArgument},
		{"unknown watcher", func() error {
			_, err := c.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: "x"}))
			return err
		}, connect.CodeNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); connect.CodeOf(err) != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
		})
	}
}

// TestEscapesAsNormalUser: ".." and symbolic links resolve, but a normal
// user gets only the access the kernel would give that user.
func TestEscapesAsNormalUser(t *testing.T) {
	envdtest.Nobody(t)
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	base, err := os.MkdirTemp("/tmp", "envd-escape-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	secretDir := filepath.Join(base, "private")
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(open, "link")
	if err := os.Symlink(secretDir, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func() error
		code connect.Code
	}{
		{"dotdot into private dir", func() error {
			_, err := c.ListDir(ctx, as("nobody", &pb.ListDirRequest{Path: open + "/../" + filepath.Base(secretDir)}))
			return err
		}, connect.CodePermissionDenied},
		{"symlink into private dir", func() error {
			_, err := c.ListDir(ctx, as("nobody", &pb.ListDirRequest{Path: link}))
			return err
		}, connect.CodePermissionDenied},
		{"root may", func() error {
			_, err := c.ListDir(ctx, as("root", &pb.ListDirRequest{Path: link}))
			return err
		}, connect.Code(0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); connect.CodeOf(err) != tc.code && !(tc.code == 0 && err == nil) {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
		})
	}
	// Writes are made as root on the user's behalf, as E2B's envd does:
	// a directory the user cannot write is no obstacle, and what is
	// created belongs to the user.
	mk, err := c.MakeDir(ctx, as("nobody", &pb.MakeDirRequest{Path: link + "/sub"}))
	if err != nil || mk.Msg.GetEntry().GetOwner() != "nobody" {
		t.Fatalf("makedir under a private dir as nobody: %v %v", mk, err)
	}
	if _, err := c.Move(ctx, as("nobody", &pb.MoveRequest{Source: link + "/sub", Destination: open + "/moved/sub"})); err != nil {
		t.Fatalf("move out of a private dir as nobody: %v", err)
	}
	if _, err := c.Remove(ctx, as("nobody", &pb.RemoveRequest{Path: link + "/secret"})); err != nil {
		t.Fatalf("remove in a private dir as nobody: %v", err)
	}
	if _, err := os.Stat(secret); !os.IsNotExist(err) {
		t.Fatalf("secret after remove: %v", err)
	}
	if st, err := os.Stat(open + "/moved"); err != nil || st.Sys().(*syscall.Stat_t).Uid == 0 {
		t.Fatalf("the destination's new parent is not nobody's: %v", err)
	}
	// A directory nobody creates in an open directory belongs to nobody.
	mk, err = c.MakeDir(ctx, as("nobody", &pb.MakeDirRequest{Path: filepath.Join(open, "mine/deep")}))
	if err != nil || mk.Msg.GetEntry().GetOwner() != "nobody" {
		t.Fatalf("makedir as nobody: %v %v", mk, err)
	}
}

func TestWatchDir(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.WatchDir(ctx, connect.NewRequest(&pb.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() || s.Msg().GetStart() == nil {
		t.Fatalf("first event not start: %v %v", s.Msg(), s.Err())
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	want := func(key string) {
		t.Helper()
		for !seen[key] {
			if !s.Receive() {
				t.Fatalf("stream ended waiting for %s: %v", key, s.Err())
			}
			e := s.Msg().GetFilesystem()
			if e == nil {
				continue
			}
			seen[e.GetName()+" "+e.GetType().String()] = true
			if e.GetType() == pb.EventType_EVENT_TYPE_CREATE && e.GetEntry() == nil {
				t.Fatalf("create event without entry: %v", e)
			}
		}
	}
	want("sub EVENT_TYPE_CREATE")
	// The new directory is watched too (recursive).
	if err := os.WriteFile(filepath.Join(dir, "sub/f.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	want("sub/f.txt EVENT_TYPE_CREATE")
	want("sub/f.txt EVENT_TYPE_WRITE")
	if err := os.Remove(filepath.Join(dir, "sub/f.txt")); err != nil {
		t.Fatal(err)
	}
	want("sub/f.txt EVENT_TYPE_REMOVE")
}

// TestWatchDirNewTreeContents: a directory that appears with entries
// already in it (made, or filled before its watch is in place, or moved in
// whole) has those entries reported too: a recursive watch misses nothing
// that a new directory holds (e2b TestWatchPolling missed sub/one written
// just after mkdir sub).
func TestWatchDirNewTreeContents(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, "tree/deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tree/one", "tree/deep/two"} {
		if err := os.WriteFile(filepath.Join(outside, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.WatchDir(ctx, connect.NewRequest(&pb.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() || s.Msg().GetStart() == nil {
		t.Fatalf("first event not start: %v %v", s.Msg(), s.Err())
	}
	// Moved in whole: inotify reports the directory alone.
	if err := os.Rename(filepath.Join(outside, "tree"), filepath.Join(dir, "tree")); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, key := range []string{"tree", "tree/one", "tree/deep", "tree/deep/two"} {
		for !seen[key] {
			if !s.Receive() {
				t.Fatalf("stream ended waiting for %s (seen %v): %v", key, seen, s.Err())
			}
			if e := s.Msg().GetFilesystem(); e != nil && e.GetType() == pb.EventType_EVENT_TYPE_CREATE {
				if e.GetEntry() == nil {
					t.Fatalf("create event without entry: %v", e)
				}
				seen[e.GetName()] = true
			}
		}
	}
}

func TestPollingWatcher(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := context.Background()
	dir := t.TempDir()
	cw, err := c.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.GetWatcherId()
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var got []*pb.FilesystemEvent
	for len(got) == 0 && time.Now().Before(deadline) {
		ev, err := c.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Msg.GetEvents()...)
		if len(got) == 0 {
			time.Sleep(10 * time.Millisecond) // polling is the API under test
		}
	}
	if len(got) == 0 || got[0].GetName() != "a" || got[0].GetType() != pb.EventType_EVENT_TYPE_CREATE {
		t.Fatalf("events %v", got)
	}
	if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("second remove: %v", err)
	}
}

func TestPermissions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode os.FileMode
		want string
	}{
		{0o644, "-rw-r--r--"},
		{os.ModeDir | 0o755, "drwxr-xr-x"},
		{os.ModeSymlink | 0o777, "lrwxrwxrwx"},
		{os.ModeDir | os.ModeSticky | 0o777, "drwxrwxrwt"},
		{os.ModeSetuid | 0o644, "-rwSr--r--"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			if got := Permissions(tc.mode); got != tc.want {
				t.Fatalf("got %q", got)
			}
		})
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "m")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteMetadata(f, map[string]string{"a": "1", "b": "2"}); err != nil {
		envdtest.Require(t, false, "user xattrs unsupported here: "+err.Error())
	}
	if err := WriteMetadata(f, map[string]string{"b": "3"}); err != nil {
		t.Fatal(err)
	}
	md, err := ReadMetadata(f)
	if err != nil || len(md) != 1 || md["b"] != "3" {
		t.Fatalf("metadata %v %v", md, err)
	}
	e, err := Entry(f)
	if err != nil || e.GetMetadata()["b"] != "3" {
		t.Fatalf("entry metadata %v %v", e, err)
	}
}
