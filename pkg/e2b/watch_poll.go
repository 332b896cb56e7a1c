package e2b

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	fspb "github.com/warren-sandbox/warren/api/envd/filesystem"
)

// ErrWatcherStopped is returned by a PollingWatcher used after Stop.
var ErrWatcherStopped = errors.New("e2b: the watcher is stopped")

// PollingWatcher collects the changes below a directory in envd until
// they are asked for: the Python SDK's synchronous watch, for callers
// that cannot hold a stream open (short-lived processes, request
// handlers). envd keeps a bounded number of events between two calls
// of NewEvents and drops the oldest beyond it.
type PollingWatcher struct {
	e    *envd
	id   string
	path string
	user string
	done atomic.Bool
}

// WatchPolling starts a polling watcher of the directory at path; changes
// made after it returns are collected.
func (f *Files) WatchPolling(ctx context.Context, path string, o WatchOptions) (*PollingWatcher, error) {
	if err := f.e.checkWatch(o); err != nil {
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	ctx, cancel := f.e.unary(ctx)
	defer cancel()
	req := &fspb.CreateWatcherRequest{Path: path, Recursive: o.Recursive, IncludeEntry: o.IncludeEntry, AllowNetworkMounts: o.AllowNetworkMounts}
	resp, err := f.e.fs.CreateWatcher(ctx, rpc(f.e, req, o.User))
	if err != nil {
		return nil, rpcErr(err, "watch %s", path)
	}
	return &PollingWatcher{e: f.e, id: resp.Msg.GetWatcherId(), path: path, user: o.User}, nil
}

// NewEvents returns the changes since the last call (or since the watch
// started), oldest first; none is an empty slice.
func (w *PollingWatcher) NewEvents(ctx context.Context) ([]FilesystemEvent, error) {
	if w.done.Load() {
		return nil, fmt.Errorf("watch %s: %w", w.path, ErrWatcherStopped)
	}
	ctx, cancel := w.e.unary(ctx)
	defer cancel()
	resp, err := w.e.fs.GetWatcherEvents(ctx, rpc(w.e, &fspb.GetWatcherEventsRequest{WatcherId: w.id}, w.user))
	if err != nil {
		return nil, rpcErr(err, "events of watch %s", w.path)
	}
	out := []FilesystemEvent{}
	for _, fe := range resp.Msg.GetEvents() {
		if _, ok := eventTypes[fe.GetType()]; ok {
			out = append(out, eventOf(fe))
		}
	}
	return out, nil
}

// Stop ends the watch in envd; its events not yet asked for are lost.
func (w *PollingWatcher) Stop(ctx context.Context) error {
	if w.done.Load() {
		return nil
	}
	ctx, cancel := w.e.unary(ctx)
	defer cancel()
	if _, err := w.e.fs.RemoveWatcher(ctx, rpc(w.e, &fspb.RemoveWatcherRequest{WatcherId: w.id}, w.user)); err != nil {
		return rpcErr(err, "stop watch %s", w.path)
	}
	w.done.Store(true)
	return nil
}
