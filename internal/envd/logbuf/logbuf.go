// Package logbuf keeps a sandbox's own log inside envd: envd's log lines
// and the output of the template's start command, as entries with a time,
// a level and a message, in a ring bounded by size (the oldest entries go
// first). envd serves it at GET /logs for the API's sandbox logs routes;
// it lives in the sandbox's memory, so it survives a pause with memory.
package logbuf

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultMaxBytes bounds a Buffer unless told otherwise.
const DefaultMaxBytes = 1 << 20

// maxLine bounds one output line; longer ones are split.
const maxLine = 16 << 10

// Entry is one log line.
type Entry struct {
	Time    time.Time         `json:"timestamp"`
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

func (e *Entry) size() int {
	n := len(e.Message) + len(e.Level) + 32
	for k, v := range e.Fields {
		n += len(k) + len(v)
	}
	return n
}

// Buffer is a bounded, concurrency-safe ring of entries.
type Buffer struct {
	mu      sync.Mutex
	max     int
	size    int
	entries []Entry
	now     func() time.Time
}

// New returns a Buffer of at most maxBytes (DefaultMaxBytes when <= 0).
func New(maxBytes int) *Buffer {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Buffer{max: maxBytes, now: time.Now}
}

// Add appends e (its Time set when zero), dropping the oldest entries
// beyond the size bound.
func (b *Buffer) Add(e Entry) {
	if e.Time.IsZero() {
		e.Time = b.now()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entries = append(b.entries, e)
	b.size += e.size()
	drop := 0
	for b.size > b.max && drop < len(b.entries)-1 {
		b.size -= b.entries[drop].size()
		drop++
	}
	if drop > 0 {
		b.entries = append(b.entries[:0:0], b.entries[drop:]...)
	}
}

// Reset drops every entry.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entries, b.size = nil, 0
}

// Since returns up to limit entries (all when limit <= 0) at or after
// start, oldest first.
func (b *Buffer) Since(start time.Time, limit int) []Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []Entry{}
	for _, e := range b.entries {
		if e.Time.Before(start) {
			continue
		}
		if limit > 0 && len(out) >= limit {
			break
		}
		out = append(out, e)
	}
	return out
}

// Lines returns a writer that adds one entry per line written to it, at
// level with fields (a final partial line waits for its newline, or for
// Close).
func (b *Buffer) Lines(level string, fields map[string]string) *LineWriter {
	return &LineWriter{b: b, level: level, fields: fields}
}

// LineWriter splits output into entries; see Buffer.Lines.
type LineWriter struct {
	mu     sync.Mutex
	b      *Buffer
	level  string
	fields map[string]string
	part   []byte
}

// Write implements io.Writer.
func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		switch {
		case i > maxLine || i < 0 && len(w.part) >= maxLine:
			i = maxLine
		case i < 0:
			return len(p), nil
		}
		w.emit(w.part[:i])
		if i < len(w.part) && w.part[i] == '\n' {
			i++
		}
		w.part = append(w.part[:0], w.part[i:]...)
	}
}

// Close adds a final partial line.
func (w *LineWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.part) > 0 {
		w.emit(w.part)
		w.part = nil
	}
	return nil
}

func (w *LineWriter) emit(line []byte) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	w.b.Add(Entry{Level: w.level, Message: string(line), Fields: w.fields})
}

// Handler returns an slog.Handler that adds records at level Info and
// above to b (with their attributes as fields, under logger "envd") and
// passes every record on to next.
func (b *Buffer) Handler(next slog.Handler) slog.Handler {
	return &handler{b: b, next: next}
}

type handler struct {
	b     *Buffer
	next  slog.Handler
	attrs []slog.Attr
	group string
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelInfo {
		fields := map[string]string{"logger": "envd"}
		add := func(a slog.Attr) bool {
			k := a.Key
			if h.group != "" {
				k = h.group + "." + k
			}
			fields[k] = a.Value.Resolve().String()
			return true
		}
		for _, a := range h.attrs {
			add(a)
		}
		r.Attrs(add)
		h.b.Add(Entry{Time: r.Time, Level: levelName(r.Level), Message: r.Message, Fields: fields})
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{b: h.b, next: h.next.WithAttrs(as), attrs: append(append([]slog.Attr{}, h.attrs...), as...), group: h.group}
}

func (h *handler) WithGroup(name string) slog.Handler {
	g := name
	if h.group != "" {
		g = h.group + "." + name
	}
	return &handler{b: h.b, next: h.next.WithGroup(name), attrs: h.attrs, group: g}
}

func levelName(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warn"
	case l >= slog.LevelInfo:
		return "info"
	default:
		return "debug"
	}
}
