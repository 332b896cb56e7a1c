package e2b

import (
	"context"
	"fmt"
	"sync"

	fspb "github.com/warren-sandbox/warren/api/envd/filesystem"
)

// EventType is the kind of a filesystem change.
type EventType string

// The kinds of changes.
const (
	EventCreate EventType = "create"
	EventWrite  EventType = "write"
	EventRemove EventType = "remove"
	EventRename EventType = "rename"
	EventChmod  EventType = "chmod"
)

var eventTypes = map[fspb.EventType]EventType{
	fspb.EventType_EVENT_TYPE_CREATE: EventCreate,
	fspb.EventType_EVENT_TYPE_WRITE:  EventWrite,
	fspb.EventType_EVENT_TYPE_REMOVE: EventRemove,
	fspb.EventType_EVENT_TYPE_RENAME: EventRename,
	fspb.EventType_EVENT_TYPE_CHMOD:  EventChmod,
}

// FilesystemEvent is one change below a watched directory.
type FilesystemEvent struct {
	// Name is the changed entry's path relative to the watched directory.
	Name string
	Type EventType
	// Entry describes the changed entry with WatchOptions.IncludeEntry,
	// when envd could still read it (nil after a remove or a rename away).
	Entry *EntryInfo
}

func eventOf(fe *fspb.FilesystemEvent) FilesystemEvent {
	ev := FilesystemEvent{Name: fe.GetName(), Type: eventTypes[fe.GetType()]}
	if fe.Entry != nil {
		e := entryOf(fe.Entry)
		ev.Entry = &e
	}
	return ev
}

// WatchOptions describe a watch.
type WatchOptions struct {
	FileOptions
	// Recursive also watches the subdirectories (envd 0.1.4 or newer).
	Recursive bool
	// IncludeEntry attaches each event's EntryInfo (envd 0.6.3 or newer).
	IncludeEntry bool
	// AllowNetworkMounts permits watching a directory on a network
	// filesystem (NFS, CIFS, FUSE), whose events may be unreliable
	// (envd 0.6.4 or newer).
	AllowNetworkMounts bool
}

// checkWatch refuses the options envd is too old for.
func (e *envd) checkWatch(o WatchOptions) error {
	if o.Recursive {
		if err := e.require(envdRecursiveWatch, "recursive watch"); err != nil {
			return err
		}
	}
	if o.IncludeEntry {
		if err := e.require(envdEntryInfo, "entry info in watch events"); err != nil {
			return err
		}
	}
	if o.AllowNetworkMounts {
		return e.require(envdNetworkMounts, "watching network mounts")
	}
	return nil
}

// Watcher delivers the changes below a directory on Events until Stop,
// its context ending, or the stream failing; Events is closed then.
type Watcher struct {
	// Events receives the changes in order.
	Events <-chan FilesystemEvent

	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// Watch starts watching the directory at path and returns once envd
// watches it, so changes made after Watch returns are reported.
func (f *Files) Watch(ctx context.Context, path string, o WatchOptions) (*Watcher, error) {
	if err := f.e.checkWatch(o); err != nil {
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	req := &fspb.WatchDirRequest{Path: path, Recursive: o.Recursive, IncludeEntry: o.IncludeEntry, AllowNetworkMounts: o.AllowNetworkMounts}
	s, err := f.e.fs.WatchDir(ctx, stream(rpc(f.e, req, o.User)))
	if err != nil {
		cancel()
		return nil, rpcErr(err, "watch %s", path)
	}
	if !s.Receive() || s.Msg().GetStart() == nil {
		err := s.Err()
		s.Close()
		cancel()
		if err == nil {
			return nil, fmt.Errorf("watch %s: expected the start event", path)
		}
		return nil, rpcErr(err, "watch %s", path)
	}
	events := make(chan FilesystemEvent, 64)
	w := &Watcher{Events: events, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer close(events)
		defer s.Close()
		for s.Receive() {
			fe := s.Msg().GetFilesystem()
			if fe == nil {
				continue // keepalive
			}
			select {
			case events <- eventOf(fe):
			case <-ctx.Done():
				return
			}
		}
		if err := s.Err(); err != nil && ctx.Err() == nil {
			w.mu.Lock()
			w.err = rpcErr(err, "watch %s", path)
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// Stop ends the watch and waits until Events is closed.
func (w *Watcher) Stop() {
	w.cancel()
	<-w.done
}

// Err is why the watch ended on its own (nil after Stop or while it runs).
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
