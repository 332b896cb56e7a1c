package noderole

import (
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/templates"
)

func TestBaseProgress(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	p := templates.PrintProgress(&out, "# base template: ")
	p(templates.Progress{Phase: "check", Message: "looking for the base template"})
	for done := int64(0); done <= 1000; done += 50 {
		p(templates.Progress{Phase: "unpack", Done: done, Total: 1000})
	}
	p(templates.Progress{Phase: "ready", Message: "base template ready"})
	got := out.String()
	for _, want := range []string{"# base template: looking for the base template\n", "unpacking 0%", "unpacking 50%", "unpacking 100%", "# base template: base template ready\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "unpacking"); n != 11 {
		t.Errorf("%d unpack lines, want 11 (every tenth):\n%s", n, got)
	}
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		if strings.HasPrefix(l, "export ") {
			t.Errorf("progress line looks like an export line: %q", l)
		}
	}
}
