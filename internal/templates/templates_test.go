package templates

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

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

func TestFileStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	a := &Template{ID: "a", Aliases: []string{"alpha"}, CreatedAt: now}
	if err := s.CreateTemplate(ctx, a); err != nil {
		t.Fatal(err)
	}
	t.Run("duplicate id", func(t *testing.T) {
		if err := s.CreateTemplate(ctx, &Template{ID: "a"}); !errdefs.IsAlreadyExists(err) {
			t.Fatalf("err = %v, want already exists", err)
		}
	})
	t.Run("duplicate alias", func(t *testing.T) {
		if err := s.CreateTemplate(ctx, &Template{ID: "b", Aliases: []string{"alpha"}}); !errdefs.IsAlreadyExists(err) {
			t.Fatalf("err = %v, want already exists", err)
		}
	})
	t.Run("same alias in another team", func(t *testing.T) {
		if err := s.CreateTemplate(ctx, &Template{ID: "c", TeamID: "tapi-2", Aliases: []string{"alpha"}}); err != nil {
			t.Fatalf("alias of another team refused: %v", err)
		}
		if err := s.CreateTemplate(ctx, &Template{ID: "d", TeamID: "tapi-2", Aliases: []string{"alpha"}}); !errdefs.IsAlreadyExists(err) {
			t.Fatalf("duplicate alias within a team: %v", err)
		}
		if got, err := s.TemplateByAlias(ctx, "tapi-2", "alpha"); err != nil || got.ID != "c" {
			t.Fatalf("team's alpha = %v, %v", got, err)
		}
	})
	t.Run("by alias", func(t *testing.T) {
		got, err := s.TemplateByAlias(ctx, "", "alpha")
		if err != nil || got.ID != "a" {
			t.Fatalf("= %v, %v", got, err)
		}
		if _, err := s.TemplateByAlias(ctx, "", "nope"); !errdefs.IsNotFound(err) {
			t.Fatalf("err = %v, want not found", err)
		}
	})
	t.Run("update survives reopen", func(t *testing.T) {
		if _, err := s.UpdateTemplate(ctx, "a", func(t *Template) error { t.Public = true; return nil }); err != nil {
			t.Fatal(err)
		}
		failing := errors.New("no")
		if _, err := s.UpdateTemplate(ctx, "a", func(t *Template) error { t.Public = false; return failing }); !errors.Is(err, failing) {
			t.Fatalf("err = %v", err)
		}
		s2, err := NewFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s2.GetTemplate(ctx, "a")
		if err != nil || !got.Public {
			t.Fatalf("= %+v, %v; want public", got, err)
		}
	})
	t.Run("bad ids", func(t *testing.T) {
		for _, id := range []string{"", "..", "../x", "a/b"} {
			if _, err := s.GetTemplate(ctx, id); !errdefs.IsNotFound(err) {
				t.Errorf("GetTemplate(%q) err = %v, want not found", id, err)
			}
		}
	})
	t.Run("builds and logs", func(t *testing.T) {
		if err := s.CreateBuild(ctx, &Build{ID: "b1", TemplateID: "a", Status: BuildWaiting, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateBuild(ctx, &Build{ID: "b2", TemplateID: "a", Status: BuildWaiting, CreatedAt: now.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
		bs, err := s.ListBuilds(ctx, "a")
		if err != nil || len(bs) != 2 || bs[0].ID != "b1" {
			t.Fatalf("ListBuilds = %v, %v", bs, err)
		}
		for i := range 5 {
			if err := s.AppendLogs(ctx, "b1", LogEntry{Level: LogInfo, Message: string(rune('a' + i))}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Logs(ctx, "b1", 3)
		if err != nil || len(got) != 2 || got[0].Message != "d" {
			t.Fatalf("Logs(3) = %v, %v", got, err)
		}
		got, err = s.Logs(ctx, "b2", 0)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("Logs of a build without logs = %#v, %v; want empty non-nil", got, err)
		}
		if err := s.DeleteTemplate(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetBuild(ctx, "b1"); !errdefs.IsNotFound(err) {
			t.Fatalf("build after template delete: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "logs", "b1.jsonl")); !os.IsNotExist(err) {
			t.Fatalf("log after template delete: %v", err)
		}
	})
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
