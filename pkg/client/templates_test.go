package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWaitTemplateBuild plays a build's status answers: log entries are
// delivered once and in order with logsOffset counting them, polling goes
// on after the end until no entry is left, and a failed build returns its
// reason as a *BuildFailedError.
func TestWaitTemplateBuild(t *testing.T) {
	t.Parallel()
	entry := func(m string) BuildLogEntry { return BuildLogEntry{Level: "info", Message: m, Step: "1"} }
	for _, tc := range []struct {
		name      string
		final     string
		reason    *BuildReason
		wantLines string
		wantErr   string
	}{
		{name: "ready", final: BuildReady, wantLines: "a,b,c,d"},
		{name: "error", final: BuildError, reason: &BuildReason{Message: "step 1 (RUN false) failed with exit code 1", Step: "1"}, wantLines: "a,b,c,d", wantErr: "exit code 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			all := []BuildLogEntry{entry("a"), entry("b"), entry("c"), entry("d")}
			var mu sync.Mutex
			polls := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/templates/t1/builds/b1/status" || r.Header.Get("X-API-Key") != "k" {
					http.Error(w, `{"code":404,"message":"no"}`, http.StatusNotFound)
					return
				}
				off, _ := strconv.Atoi(r.URL.Query().Get("logsOffset"))
				mu.Lock()
				polls++
				n := polls
				mu.Unlock()
				// Entries appear two per poll; the build ends with the
				// second poll, before every entry was fetched.
				end := min(2*n, len(all))
				info := TemplateBuildInfo{TemplateID: "t1", BuildID: "b1", Status: BuildBuilding, LogEntries: []BuildLogEntry{}}
				if off < end {
					info.LogEntries = all[off:end]
				}
				if n >= 2 {
					info.Status, info.Reason = tc.final, tc.reason
				}
				json.NewEncoder(w).Encode(info)
			}))
			t.Cleanup(srv.Close)
			var got []string
			st, err := New(srv.URL, "k").WaitTemplateBuild(context.Background(), "t1", "b1", time.Millisecond, func(e BuildLogEntry) { got = append(got, e.Message) })
			if strings.Join(got, ",") != tc.wantLines {
				t.Errorf("log lines %q, want %s", got, tc.wantLines)
			}
			if tc.wantErr == "" {
				if err != nil || st.Status != BuildReady {
					t.Fatalf("status %+v, err %v", st, err)
				}
				return
			}
			var fe *BuildFailedError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.wantErr) || fe.Reason.Step != "1" {
				t.Fatalf("err = %v, want a BuildFailedError with %q", err, tc.wantErr)
			}
		})
	}
}

// TestUploadFiles checks that an upload goes to the given URL with its
// headers and length, without the API key.
func TestUploadFiles(t *testing.T) {
	t.Parallel()
	var got http.Header
	var body string
	var length int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, length = r.Header.Clone(), r.ContentLength
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		if r.Method != http.MethodPut || r.URL.Query().Get("token") != "s" {
			http.Error(w, "invalid upload URL", http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	c := New(srv.URL, "secret-key")
	up := &FilesUpload{URL: srv.URL + "/builder/files/t/h?token=s", Headers: map[string]string{"X-Extra": "1", "Content-Length": "999"}}
	if err := c.UploadFiles(context.Background(), up, strings.NewReader("tar"), 3); err != nil {
		t.Fatal(err)
	}
	if body != "tar" || length != 3 || got.Get("X-Extra") != "1" || got.Get("X-API-Key") != "" {
		t.Errorf("upload: body %q, length %d, headers %v", body, length, got)
	}
	up.URL = srv.URL + "/builder/files/t/h?token=bad"
	err := c.UploadFiles(context.Background(), up, strings.NewReader("tar"), 3)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Errorf("upload with a bad token: %v", err)
	}
}
