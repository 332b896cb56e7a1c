package templates

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func TestMergeEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                      string
		template, create, command map[string]string
		want                      map[string]string
	}{
		{"all nil", nil, nil, nil, map[string]string{}},
		{"template only", map[string]string{"A": "1"}, nil, nil, map[string]string{"A": "1"}},
		{"create overrides template", map[string]string{"A": "1", "B": "t"}, map[string]string{"B": "c"}, nil, map[string]string{"A": "1", "B": "c"}},
		{"command overrides both", map[string]string{"B": "t"}, map[string]string{"B": "c"}, map[string]string{"B": "x", "C": "3"}, map[string]string{"B": "x", "C": "3"}},
		{"empty value still overrides", map[string]string{"PATH": "/bin"}, map[string]string{"PATH": ""}, nil, map[string]string{"PATH": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmpl := maps.Clone(tc.template)
			got := MergeEnv(tc.template, tc.create, tc.command)
			if !maps.Equal(got, tc.want) {
				t.Errorf("MergeEnv = %v, want %v", got, tc.want)
			}
			if !maps.Equal(tc.template, tmpl) {
				t.Errorf("MergeEnv changed its template argument")
			}
		})
	}
}

func TestValidateResources(t *testing.T) {
	t.Parallel()
	ip := func(v int) *int { return &v }
	mp := func(v int64) *int64 { return &v }
	lim := Limits{MaxCPU: 8, MaxMemoryMB: 8192}
	tests := []struct {
		name    string
		cpu     *int
		mem     *int64
		wantCPU int
		wantMem int64
		wantMsg string
	}{
		{"defaults", nil, nil, 2, 1024, ""},
		{"given", ip(4), mp(1024), 4, 1024, ""},
		{"cpu too low", ip(0), nil, 0, 0, "CPU count must be at least 1"},
		{"cpu too high", ip(9), nil, 0, 0, "CPU count can't be higher than 8"},
		{"memory too low", nil, mp(64), 0, 0, "Memory must be at least 128 MiB"},
		{"memory odd", nil, mp(1001), 0, 0, "Memory must be divisible by 2"},
		{"memory too high", nil, mp(16384), 0, 0, "Memory can't be higher than 8192 MiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, m, err := ValidateResources(tc.cpu, tc.mem, lim)
			if tc.name == "defaults" {
				if lc, lm, _ := ValidateResources(nil, nil, Limits{MaxCPU: 1, MaxMemoryMB: 512}); lc != 1 || lm != 512 {
					t.Errorf("defaults under low limits = %d, %d; want 1, 512", lc, lm)
				}
			}
			if tc.wantMsg != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantMsg) || !errdefs.IsInvalid(err) {
					t.Fatalf("err = %v, want invalid %q", err, tc.wantMsg)
				}
				return
			}
			if err != nil || c != tc.wantCPU || m != tc.wantMem {
				t.Fatalf("= %d, %d, %v; want %d, %d", c, m, err, tc.wantCPU, tc.wantMem)
			}
		})
	}
}

// TestFileStoreReopen holds the file store to what the conformance suite
// (filestore_test.go) cannot see: an update survives a reopen, and a
// deleted template's log files go with it.
func TestFileStoreReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTemplate(ctx, &Template{ID: "a", Aliases: []string{"alpha"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateTemplate(ctx, "a", func(t *Template) error { t.Public = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendLogs(ctx, "b1", LogEntry{Level: LogInfo, Message: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBuild(ctx, &Build{ID: "b1", TemplateID: "a"}); err != nil {
		t.Fatal(err)
	}
	s2, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.GetTemplate(ctx, "a")
	if err != nil || !got.Public {
		t.Fatalf("= %+v, %v; want public", got, err)
	}
	if err := s2.DeleteTemplate(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "b1.jsonl")); !os.IsNotExist(err) {
		t.Fatalf("log after template delete: %v", err)
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	if id := NewTemplateID(); !regexp.MustCompile(`^[a-z0-9]{20}$`).MatchString(id) {
		t.Errorf("template ID %q", id)
	}
	if id := NewBuildID(); !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Errorf("build ID %q", id)
	}
}
