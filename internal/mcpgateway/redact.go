package mcpgateway

import (
	"bytes"
	"cmp"
	"slices"
	"strings"
	"sync"
)

// minSecret is the shortest value redacted: shorter ones would blank out
// ordinary words of the logs.
const minSecret = 8

// redactor replaces secrets with "[redacted]".
type redactor struct{ r *strings.Replacer }

// newRedactor redacts every one of secrets of minSecret bytes or more,
// the longest first (so that a secret containing another goes whole).
func newRedactor(secrets ...string) *redactor {
	var s []string
	for _, v := range secrets {
		if len(v) >= minSecret && !slices.Contains(s, v) {
			s = append(s, v)
		}
	}
	slices.SortFunc(s, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	var pairs []string
	for _, v := range s {
		pairs = append(pairs, v, "[redacted]")
	}
	return &redactor{r: strings.NewReplacer(pairs...)}
}

func (r *redactor) String(s string) string { return r.r.Replace(s) }

// lineTail is an io.Writer for a server's stderr: each line, redacted,
// goes to log and the last few are kept for the error that explains a
// failed start.
type lineTail struct {
	redact *redactor
	log    func(line string)

	mu      sync.Mutex
	partial []byte
	lines   []string
}

const (
	tailLines   = 20
	maxLineSize = 2000
)

func (t *lineTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, p...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			if len(t.partial) > maxLineSize {
				t.line(string(t.partial[:maxLineSize]))
				t.partial = t.partial[maxLineSize:]
				continue
			}
			return len(p), nil
		}
		t.line(string(t.partial[:i]))
		t.partial = t.partial[i+1:]
	}
}

func (t *lineTail) line(s string) {
	s = strings.TrimRight(s, "\r")
	if len(s) > maxLineSize {
		s = s[:maxLineSize] + "..."
	}
	s = t.redact.String(s)
	if strings.TrimSpace(s) == "" {
		return
	}
	if t.log != nil {
		t.log(s)
	}
	t.lines = append(t.lines, s)
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

// Tail is the last lines written, and the pending partial line, joined.
func (t *lineTail) Tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := slices.Clone(t.lines)
	if p := strings.TrimSpace(t.redact.String(string(t.partial))); p != "" {
		lines = append(lines, p)
	}
	return strings.Join(lines, "\n")
}
