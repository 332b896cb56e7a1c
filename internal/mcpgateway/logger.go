package mcpgateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
)

// NewLogger is the gateway's logger: JSON lines to w, with every secret of
// red replaced in the message and in every attribute, whoever logs (the
// gateway, the MCP library, a server's output).
func newLogger(w io.Writer, red *redactor) *slog.Logger {
	return slog.New(&redactHandler{h: slog.NewJSONHandler(w, nil), red: red})
}

type redactHandler struct {
	h   slog.Handler
	red *redactor
}

func (r *redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r *redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, r.red.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r *redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = r.attr(a)
	}
	return &redactHandler{h: r.h.WithAttrs(red), red: r.red}
}

func (r *redactHandler) WithGroup(name string) slog.Handler {
	return &redactHandler{h: r.h.WithGroup(name), red: r.red}
}

// attr redacts a's value: strings, errors and anything else printed, and
// groups member by member.
func (r *redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, r.red.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, x := range g {
			red[i] = r.attr(x)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		return slog.String(a.Key, r.red.String(fmt.Sprint(v.Any())))
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
}
