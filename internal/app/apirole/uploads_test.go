package apirole

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/warren-sandbox/warren/internal/builder"
)

func TestWithUploads(t *testing.T) {
	t.Parallel()
	tag := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-Handler", name) })
	}
	h := WithUploads(tag("api"), tag("uploads"))
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
