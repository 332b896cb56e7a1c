package filesystem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	pb "github.com/warren-sandbox/warren/api/envd/filesystem"
	"github.com/warren-sandbox/warren/internal/envd/identity"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errconnect"
)

// watch follows changes below one directory with inotify.
type watch struct {
	fsw          *fsnotify.Watcher
	root         string
	recursive    bool
	includeEntry bool
}

// network filesystem magic numbers (statfs f_type).
var networkFS = map[int64]string{
	0x6969: "nfs", 0x517B: "smb", 0xFF534D42: "cifs", 0xFE534D42: "smb2", 0x65735546: "fuse",
}

func newWatch(u *identity.User, root string, recursive, includeEntry, allowNetwork bool) (*watch, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, statErr(root, err)
	}
	if !st.IsDir() {
		return nil, errdefs.Classf(errdefs.ErrInvalid, "path is not a directory: %s", root)
	}
	if err := u.CheckAccess(root, identity.Read|identity.Execute); err != nil {
		return nil, err
	}
	if !allowNetwork {
		var sfs unix.Statfs_t
		if err := unix.Statfs(root, &sfs); err == nil {
			if name, ok := networkFS[int64(sfs.Type)]; ok {
				return nil, errdefs.Classf(errdefs.ErrConflict, "path %s is on a network filesystem (%s); set allowNetworkMounts to watch it", root, name)
			}
		}
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, errdefs.Classf(errdefs.ErrExhausted, "watch %s", root)
	}
	w := &watch{fsw: fsw, root: root, recursive: recursive, includeEntry: includeEntry}
	if err := w.add(root); err != nil {
		_ = fsw.Close()
		return nil, err
	}
	return w, nil
}

// add watches dir and, when recursive, every directory below it.
func (w *watch) add(dir string) error {
	if !w.recursive {
		if err := w.fsw.Add(dir); err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return fmt.Errorf("watch %s: %w", dir, err)
			}
			return nil
		}
		if d.IsDir() {
			if err := w.fsw.Add(p); err != nil && p == dir {
				return fmt.Errorf("watch %s: %w", dir, err)
			}
		}
		return nil
	})
}

var opTypes = []struct {
	op fsnotify.Op
	t  pb.EventType
}{
	{fsnotify.Create, pb.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, pb.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, pb.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, pb.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, pb.EventType_EVENT_TYPE_CHMOD},
}

// run emits events until ctx ends or the watcher fails.
func (w *watch) run(ctx context.Context, emit func(*pb.FilesystemEvent)) error {
	defer w.fsw.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return nil
			}
			return fmt.Errorf("watch %s: %w", w.root, err)
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return nil
			}
			w.handle(ev, emit)
		}
	}
}

func (w *watch) handle(ev fsnotify.Event, emit func(*pb.FilesystemEvent)) {
	rel, err := filepath.Rel(w.root, ev.Name)
	if err != nil {
		rel = ev.Name
	}
	for _, ot := range opTypes {
		if ev.Has(ot.op) {
			w.emit(ev.Name, rel, ot.t, emit)
		}
	}
	if w.recursive && ev.Has(fsnotify.Create) {
		if st, err := os.Lstat(ev.Name); err == nil && st.IsDir() {
			w.addNew(ev.Name, emit)
		}
	}
}

// emit sends one event of path (rel to the root), with its entry when
// asked for and the path is still there.
func (w *watch) emit(path, rel string, t pb.EventType, emit func(*pb.FilesystemEvent)) {
	fe := &pb.FilesystemEvent{Name: rel, Type: t}
	if w.includeEntry && t != pb.EventType_EVENT_TYPE_REMOVE && t != pb.EventType_EVENT_TYPE_RENAME {
		if e, err := Entry(path); err == nil {
			fe.Entry = e
		}
	}
	emit(fe)
}

// addNew watches a directory that has just appeared, and every directory
// below it, then reports what it already holds as created: entries made
// before its watch was in place (a file written just after the mkdir, a
// tree moved in whole) raise no event of their own. One made after the
// watch may be reported twice; none is missed.
func (w *watch) addNew(dir string, emit func(*pb.FilesystemEvent)) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			_ = w.fsw.Add(p)
		}
		if p == dir {
			return nil
		}
		rel, rerr := filepath.Rel(w.root, p)
		if rerr != nil {
			rel = p
		}
		w.emit(p, rel, pb.EventType_EVENT_TYPE_CREATE, emit)
		return nil
	})
}

// WatchDir streams changes below a directory until the client leaves.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	u, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return errconnect.From(err)
	}
	w, err := newWatch(u, path, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), req.Msg.GetAllowNetworkMounts())
	if err != nil {
		return errconnect.From(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan *pb.FilesystemEvent, 256)
	runErr := make(chan error, 1)
	go func() {
		runErr <- w.run(ctx, func(e *pb.FilesystemEvent) {
			select {
			case events <- e:
			case <-ctx.Done():
			}
		})
	}()
	if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	tick := time.NewTicker(keepalive(req.Header()))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-runErr:
			if err != nil {
				return errconnect.From(err)
			}
			return nil
		case e := <-events:
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: e}}); err != nil {
				return err
			}
		case <-tick.C:
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		}
	}
}

func keepalive(h interface{ Get(string) string }) time.Duration {
	if v, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return 90 * time.Second
}

// maxBufferedEvents bounds a polling watcher's buffer; the oldest events
// are dropped beyond it.
const maxBufferedEvents = 10000

// pollWatcher buffers events for GetWatcherEvents.
type pollWatcher struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	events []*pb.FilesystemEvent
	err    error
}

type watcherSet struct {
	mu sync.Mutex
	m  map[string]*pollWatcher
}

func newWatcherSet() *watcherSet { return &watcherSet{m: map[string]*pollWatcher{}} }

func (ws *watcherSet) closeAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for id, pw := range ws.m {
		pw.cancel()
		delete(ws.m, id)
	}
}

// CreateWatcher starts a polling watcher.
func (s *Service) CreateWatcher(_ context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	u, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, errconnect.From(err)
	}
	w, err := newWatch(u, path, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), req.Msg.GetAllowNetworkMounts())
	if err != nil {
		return nil, errconnect.From(err)
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	pw := &pollWatcher{cancel: cancel}
	s.watchers.mu.Lock()
	s.watchers.m[id] = pw
	s.watchers.mu.Unlock()
	go func() {
		err := w.run(ctx, func(e *pb.FilesystemEvent) {
			pw.mu.Lock()
			if len(pw.events) >= maxBufferedEvents {
				pw.events = pw.events[1:]
			}
			pw.events = append(pw.events, e)
			pw.mu.Unlock()
		})
		pw.mu.Lock()
		pw.err = err
		pw.mu.Unlock()
	}()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *Service) pollWatcher(id string) (*pollWatcher, error) {
	s.watchers.mu.Lock()
	defer s.watchers.mu.Unlock()
	pw, ok := s.watchers.m[id]
	if !ok {
		return nil, errdefs.Classf(errdefs.ErrNotFound, "watcher %q not found", id)
	}
	return pw, nil
}

// GetWatcherEvents returns and clears a polling watcher's buffered events.
func (s *Service) GetWatcherEvents(_ context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	pw, err := s.pollWatcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, errconnect.From(err)
	}
	pw.mu.Lock()
	events, werr := pw.events, pw.err
	pw.events = nil
	pw.mu.Unlock()
	if werr != nil && len(events) == 0 && !errors.Is(werr, context.Canceled) {
		return nil, errconnect.From(werr)
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: events}), nil
}

// RemoveWatcher stops a polling watcher.
func (s *Service) RemoveWatcher(_ context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	s.watchers.mu.Lock()
	pw, ok := s.watchers.m[req.Msg.GetWatcherId()]
	delete(s.watchers.m, req.Msg.GetWatcherId())
	s.watchers.mu.Unlock()
	if !ok {
		return nil, errconnect.From(errdefs.Classf(errdefs.ErrNotFound, "watcher %q not found", req.Msg.GetWatcherId()))
	}
	pw.cancel()
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}
