package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/templates"
)

func TestWithUploads(t *testing.T) {
	t.Parallel()
	tag := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-Handler", name) })
	}
	h := withUploads(tag("api"), tag("uploads"))
	for _, tc := range []struct{ method, path, want string }{
		{"PUT", builder.UploadPathPrefix + "tpl/hash?token=x", "uploads"},
		{"GET", "/templates", "api"},
		{"PUT", "/builder/other", "api"},
		{"GET", "/v2/sandboxes", "api"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if got := rec.Header().Get("X-Handler"); got != tc.want {
				t.Fatalf("served by %q, want %q", got, tc.want)
			}
		})
	}
}

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
