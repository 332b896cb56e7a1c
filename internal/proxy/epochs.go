package proxy

import "sync"

// maxWatchedEpochs bounds the sandboxes whose epoch a proxy remembers;
// past it the proxy forgets them all, which costs at most one needless
// close of idle connections.
const maxWatchedEpochs = 4096

// epochWatch closes a transport's pooled idle connections when a sandbox
// it forwarded to before is seen again in another epoch (it was paused
// and resumed, or restarted). A resumed sandbox may keep its address
// (docs/lifecycle.md §9) while its guest's network stack is restored from
// the checkpoint, so a connection pooled before the pause would be reset
// by the guest: a request sent on it fails (a POST is not retried) where
// a new connection would have succeeded.
type epochWatch struct {
	mu   sync.Mutex
	seen map[string]int64
	tr   interface{ CloseIdleConnections() }
}

func newEpochWatch(tr interface{ CloseIdleConnections() }) *epochWatch {
	return &epochWatch{seen: map[string]int64{}, tr: tr}
}

// observe records sandbox id's epoch, and closes the idle connections when
// it changed since the last request to it.
func (w *epochWatch) observe(id string, epoch int64) {
	if w.changed(id, epoch) {
		w.tr.CloseIdleConnections()
	}
}

func (w *epochWatch) changed(id string, epoch int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, ok := w.seen[id]
	if !ok && len(w.seen) >= maxWatchedEpochs {
		clear(w.seen)
	}
	w.seen[id] = epoch
	return ok && prev != epoch
}
