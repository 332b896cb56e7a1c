package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/warren-sandbox/warren/pkg/client"
)

// TestRetry429 sends a REST request again, body and all, after a 429
// with a numeric Retry-After, up to the retry count; a 429 without a
// number, or with retries off, comes back as the error.
func TestRetry429(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		busy       int32 // 429s before the answer
		retryAfter string
		retries    int
		wantCalls  int32
		wantErr    bool
	}{
		{"two busy answers", 2, "0", 0, 3, false},
		{"more busy answers than retries", 5, "0", 0, 4, true},
		{"no number", 1, "soon", 0, 1, true},
		{"retries off", 1, "0", -1, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				var req client.NewSandbox
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.TemplateID != "tpl" {
					t.Errorf("call %d: body %+v %v", n, req, err)
				}
				if n <= tc.busy {
					w.Header().Set("Retry-After", tc.retryAfter)
					writeJSON(w, 429, client.Error{Code: 429, Message: "busy"})
					return
				}
				writeJSON(w, 201, client.Sandbox{SandboxID: "s1", TemplateID: "tpl"})
			}))
			defer srv.Close()
			_, err := Create(context.Background(), CreateOptions{Config: Config{APIKey: "k", APIURL: srv.URL, Retries: tc.retries}, Template: "tpl"})
			var ae *client.APIError
			if tc.wantErr != (err != nil) || (err != nil && !(errors.As(err, &ae) && ae.Status == 429)) || calls.Load() != tc.wantCalls {
				t.Fatalf("err %v after %d calls, want error %v after %d", err, calls.Load(), tc.wantErr, tc.wantCalls)
			}
		})
	}
}
