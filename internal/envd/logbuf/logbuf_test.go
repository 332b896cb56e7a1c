package logbuf

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestBoundedAndOrdered(t *testing.T) {
	t.Parallel()
	b := New(4096)
	w := b.Lines("info", map[string]string{"stream": "stdout"})
	for i := range 200 {
		fmt.Fprintf(w, "line %03d\n", i)
	}
	fmt.Fprint(w, "partial")
	all := b.Since(time.Time{}, 0)
	if len(all) == 0 || len(all) >= 200 || all[len(all)-1].Message != "line 199" || all[0].Message == "line 000" {
		t.Fatalf("%d entries, first %q last %q", len(all), all[0].Message, all[len(all)-1].Message)
	}
	w.Close()
	if last := b.Since(time.Time{}, 0); last[len(last)-1].Message != "partial" || last[len(last)-1].Fields["stream"] != "stdout" {
		t.Fatalf("partial line: %+v", last[len(last)-1])
	}
	if got := b.Since(time.Time{}, 3); len(got) != 3 {
		t.Fatalf("limit: %d", len(got))
	}
	if got := b.Since(time.Now().Add(time.Hour), 0); len(got) != 0 {
		t.Fatalf("start in the future: %d", len(got))
	}
	big := New(0)
	fmt.Fprint(big.Lines("info", nil), strings.Repeat("x", maxLine+5)+"\n")
	last := big.Since(time.Time{}, 0)
	if n := len(last); last[n-2].Message != strings.Repeat("x", maxLine) || last[n-1].Message != "xxxxx" {
		t.Fatalf("long line not split: %d, %d", len(last[n-2].Message), len(last[n-1].Message))
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	b := New(0)
	var out strings.Builder
	log := slog.New(b.Handler(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))).With("k", "v")
	log.Debug("hidden")
	log.Info("kept", "pid", 7)
	log.Error("bad")
	got := b.Since(time.Time{}, 0)
	if len(got) != 2 || got[0].Message != "kept" || got[0].Fields["pid"] != "7" || got[0].Fields["k"] != "v" || got[1].Level != "error" {
		t.Fatalf("%+v", got)
	}
	if strings.Contains(out.String(), "kept") || !strings.Contains(out.String(), "bad") {
		t.Fatalf("next handler's level not kept: %s", out.String())
	}
}
