package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRebuildBase: --rebuild-base leaves a request on the data
// directory that the base template's next preparation honours (tested in
// internal/builder and internal/templates); the request stays when the
// start fails before that. The fake driver has no base template.
func TestServeRebuildBase(t *testing.T) {
	t.Parallel()
	request := func(dir string) string { return filepath.Join(dir, "templates", "base", "rebuild-requested") }
	tests := []struct {
		name        string
		args        []string
		wantErr     string
		wantRequest bool
	}{
		{name: "fake driver refused", args: []string{"--driver", "fake"}, wantErr: "--rebuild-base: the fake driver has no base template"},
		{name: "request kept when the start fails", args: []string{"--driver", "runsc", "--runsc", "/nonexistent/runsc"}, wantErr: "runsc", wantRequest: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := append([]string{"serve", "--rebuild-base", "--data-dir", dir, "--listen", "127.0.0.1:0"}, tc.args...)
			_, err := runCmd(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if _, err := os.Stat(request(dir)); (err == nil) != tc.wantRequest {
				t.Errorf("request file present %v, want %v", err == nil, tc.wantRequest)
			}
		})
	}
}
