package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// maxBacklog bounds the events kept while no one watches.
const maxBacklog = 256

// events delivers the agent's events to its watchers (Agent.Watch). Its
// mu is a leaf: nothing else is taken under it.
type events struct {
	log     *slog.Logger
	mu      sync.Mutex
	subs    map[chan nodeapi.Event]struct{}
	backlog []nodeapi.Event
	closed  bool
}

// watch adds a watcher until ctx ends; it gets the backlog first.
func (e *events) watch(ctx context.Context) (<-chan nodeapi.Event, error) {
	ch, err := e.subscribe()
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { e.unsubscribe(ch) })
	return ch, nil
}

func (e *events) subscribe() (chan nodeapi.Event, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, fmt.Errorf("node agent: %w", errdefs.ErrUnavailable)
	}
	ch := make(chan nodeapi.Event, 256)
	for _, ev := range e.backlog {
		ch <- ev
	}
	e.backlog = nil
	e.subs[ch] = struct{}{}
	return ch, nil
}

func (e *events) unsubscribe(ch chan nodeapi.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.subs[ch]; ok {
		delete(e.subs, ch)
		close(ch)
	}
}

// close ends every watch (Close).
func (e *events) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	for ch := range e.subs {
		delete(e.subs, ch)
		close(ch)
	}
}

// emit delivers ev to every watcher, or keeps it while there is none.
func (e *events) emit(ev nodeapi.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.subs) == 0 {
		if len(e.backlog) < maxBacklog {
			e.backlog = append(e.backlog, ev)
		}
		return
	}
	for ch := range e.subs {
		select {
		case ch <- ev:
		default:
			e.log.Warn("watcher too slow, event dropped", "sandbox_id", ev.SandboxID, "event", ev.Type)
		}
	}
}
