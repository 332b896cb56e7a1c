// Package templatestest is the conformance suite of templates.Store: every
// implementation (the file store of `warren serve`, the SQL store of
// `warren api` over SQLite and Postgres) runs Run, so the catalog answers
// alike over each.
package templatestest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/templates"
)

// Open returns two handles on one new, empty store: the same value twice
// for a store one process owns, two opens of one database for a store
// that replicas share.
type Open func(t *testing.T) (a, b templates.Store)

// Run runs the conformance suite against the stores open makes.
func Run(t *testing.T, open Open) {
	t.Run("templates", func(t *testing.T) { testTemplates(t, open) })
	t.Run("builds and logs", func(t *testing.T) { testBuilds(t, open) })
	t.Run("finish build", func(t *testing.T) { testFinishBuild(t, open) })
	t.Run("bad ids", func(t *testing.T) { testBadIDs(t, open) })
	t.Run("shared", func(t *testing.T) { testShared(t, open) })
}

func testTemplates(t *testing.T, open Open) {
	ctx := context.Background()
	s, other := open(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := &templates.Template{ID: "a", Aliases: []string{"alpha"}, CPUCount: 2, MemoryMB: 512, DiskMB: 4096,
		Tags: map[string]templates.Tag{templates.DefaultTag: {BuildID: "b0", CreatedAt: now}}, CreatedAt: now, UpdatedAt: now}
	if err := s.CreateTemplate(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := other.GetTemplate(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "a" || !slices.Equal(got.Aliases, a.Aliases) || got.CPUCount != 2 || got.MemoryMB != 512 ||
		got.Tags[templates.DefaultTag].BuildID != "b0" || !got.CreatedAt.Equal(now) {
		t.Fatalf("GetTemplate = %+v, want %+v", got, a)
	}
	if err := s.CreateTemplate(ctx, &templates.Template{ID: "a"}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("duplicate id: err = %v, want already exists", err)
	}
	if err := other.CreateTemplate(ctx, &templates.Template{ID: "b", Aliases: []string{"alpha"}}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("duplicate alias: err = %v, want already exists", err)
	}
	if err := s.CreateTemplate(ctx, &templates.Template{ID: "b", Aliases: []string{"a"}}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("alias that is another template's ID: err = %v, want already exists", err)
	}
	if _, err := s.GetTemplate(ctx, "b"); !errdefs.IsNotFound(err) {
		t.Fatalf("a refused create left a template: %v", err)
	}
	// Aliases are unique within a team, not across teams.
	if err := s.CreateTemplate(ctx, &templates.Template{ID: "c", TeamID: "team-2", Aliases: []string{"alpha"}, CreatedAt: now.Add(time.Second)}); err != nil {
		t.Fatalf("alias of another team refused: %v", err)
	}
	if err := s.CreateTemplate(ctx, &templates.Template{ID: "d", TeamID: "team-2", Aliases: []string{"alpha"}}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("duplicate alias within a team: %v", err)
	}
	for _, c := range []struct{ team, alias, want string }{{"", "alpha", "a"}, {"team-2", "alpha", "c"}} {
		got, err := other.TemplateByAlias(ctx, c.team, c.alias)
		if err != nil || got.ID != c.want {
			t.Fatalf("TemplateByAlias(%q, %q) = %v, %v; want %s", c.team, c.alias, got, err, c.want)
		}
	}
	if _, err := s.TemplateByAlias(ctx, "", "nope"); !errdefs.IsNotFound(err) {
		t.Fatalf("unknown alias: err = %v, want not found", err)
	}
	if _, err := s.TemplateByAlias(ctx, "team-3", "alpha"); !errdefs.IsNotFound(err) {
		t.Fatalf("alias of no template of team-3: err = %v, want not found", err)
	}

	// Updates: fn's result is stored, unless fn fails; the ID stays.
	if _, err := s.UpdateTemplate(ctx, "a", func(t *templates.Template) error {
		t.Public = true
		t.Aliases = append(t.Aliases, "alpha-2")
		t.ID = "elsewhere"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	failing := errors.New("no")
	if _, err := s.UpdateTemplate(ctx, "a", func(t *templates.Template) error { t.Public = false; return failing }); !errors.Is(err, failing) {
		t.Fatalf("failing update: err = %v", err)
	}
	got, err = other.GetTemplate(ctx, "a")
	if err != nil || !got.Public || !slices.Equal(got.Aliases, []string{"alpha", "alpha-2"}) {
		t.Fatalf("after updates = %+v, %v; want public with two aliases", got, err)
	}
	if got, err := other.TemplateByAlias(ctx, "", "alpha-2"); err != nil || got.ID != "a" {
		t.Fatalf("alias added by an update = %v, %v", got, err)
	}
	if _, err := s.GetTemplate(ctx, "elsewhere"); !errdefs.IsNotFound(err) {
		t.Fatalf("an update moved the template: %v", err)
	}
	// An update that takes another template's alias is refused whole.
	if _, err := s.UpdateTemplate(ctx, "c", func(t *templates.Template) error {
		t.TeamID = ""
		t.Public = true
		return nil
	}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("update onto a taken alias: err = %v, want already exists", err)
	}
	if got, err := s.GetTemplate(ctx, "c"); err != nil || got.TeamID != "team-2" || got.Public {
		t.Fatalf("refused update was stored: %+v, %v", got, err)
	}
	// Dropping an alias frees it.
	if _, err := s.UpdateTemplate(ctx, "a", func(t *templates.Template) error { t.Aliases = []string{"alpha"}; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTemplate(ctx, &templates.Template{ID: "e", Aliases: []string{"alpha-2"}, CreatedAt: now.Add(2 * time.Second)}); err != nil {
		t.Fatalf("alias dropped by an update is still taken: %v", err)
	}
	if _, err := s.UpdateTemplate(ctx, "nope", func(*templates.Template) error { return nil }); !errdefs.IsNotFound(err) {
		t.Fatalf("update of a missing template: err = %v, want not found", err)
	}

	list, err := other.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, t := range list {
		ids = append(ids, t.ID)
	}
	if !slices.Equal(ids, []string{"a", "c", "e"}) {
		t.Fatalf("ListTemplates = %v, want [a c e] (oldest first)", ids)
	}
}

func testBuilds(t *testing.T, open Open) {
	ctx := context.Background()
	s, other := open(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.CreateTemplate(ctx, &templates.Template{ID: "a", Aliases: []string{"alpha"}, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	b1 := &templates.Build{ID: "b1", TemplateID: "a", Status: templates.BuildWaiting, Tags: []string{"v1"},
		Env: map[string]string{"K": "v"}, User: "user", Workdir: "/home/user", StartCmd: "s", ReadyCmd: "r",
		CPUCount: 2, MemoryMB: 1024, DiskMB: 4096, CreatedAt: now, UpdatedAt: now}
	if err := s.CreateBuild(ctx, b1); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBuild(ctx, &templates.Build{ID: "b1", TemplateID: "a"}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("duplicate build: err = %v, want already exists", err)
	}
	if err := other.CreateBuild(ctx, &templates.Build{ID: "b2", TemplateID: "a", Status: templates.BuildWaiting, CreatedAt: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	got, err := other.GetBuild(ctx, "b1")
	if err != nil || got.TemplateID != "a" || got.Env["K"] != "v" || got.ReadyCmd != "r" || got.MemoryMB != 1024 ||
		!slices.Equal(got.Tags, []string{"v1"}) || !got.CreatedAt.Equal(now) {
		t.Fatalf("GetBuild = %+v, %v; want %+v", got, err, b1)
	}
	finished := now.Add(time.Minute)
	if _, err := s.UpdateBuild(ctx, "b1", func(b *templates.Build) error {
		b.Status = templates.BuildReady
		b.RootFSDir = "/data/builds/b1/rootfs"
		b.RootFSSHA256, b.RootFSSize = strings.Repeat("a", 64), 4096
		b.SnapshotSHA256, b.SnapshotSize = strings.Repeat("b", 64), 8192
		b.SnapshotHost = &nodeapi.SnapshotHost{Runtime: "runsc sha256:0 platform systrap", Envd: "sha256:1", CPUFlags: []string{"avx2", "sse4_2"}, VCPUs: 2, MemoryMB: 512, TmpMB: 256, DiskMB: 1024}
		b.FinishedAt = finished
		b.ID = "elsewhere"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	failing := errors.New("no")
	if _, err := s.UpdateBuild(ctx, "b1", func(b *templates.Build) error { b.Status = templates.BuildError; return failing }); !errors.Is(err, failing) {
		t.Fatalf("failing update: err = %v", err)
	}
	got, err = other.GetBuild(ctx, "b1")
	if err != nil || got.Status != templates.BuildReady || got.RootFSDir != "/data/builds/b1/rootfs" || !got.FinishedAt.Equal(finished) {
		t.Fatalf("after updates = %+v, %v", got, err)
	}
	// The artifacts' digests and the snapshot's host, which a node that
	// pulls the build checks before use.
	if got.RootFSSHA256 != strings.Repeat("a", 64) || got.RootFSSize != 4096 || got.SnapshotSHA256 != strings.Repeat("b", 64) || got.SnapshotSize != 8192 ||
		got.SnapshotHost == nil || !got.SnapshotHost.Equal(nodeapi.SnapshotHost{Runtime: "runsc sha256:0 platform systrap", Envd: "sha256:1", CPUFlags: []string{"avx2", "sse4_2"}, VCPUs: 2, MemoryMB: 512, TmpMB: 256, DiskMB: 1024}) {
		t.Fatalf("artifacts after updates = %+v", got)
	}
	if _, err := s.UpdateBuild(ctx, "nope", func(*templates.Build) error { return nil }); !errdefs.IsNotFound(err) {
		t.Fatalf("update of a missing build: err = %v, want not found", err)
	}
	bs, err := other.ListBuilds(ctx, "a")
	if err != nil || len(bs) != 2 || bs[0].ID != "b1" || bs[1].ID != "b2" {
		t.Fatalf("ListBuilds = %v, %v; want b1, b2", bs, err)
	}
	if bs, err := s.ListBuilds(ctx, "nope"); err != nil || len(bs) != 0 {
		t.Fatalf("ListBuilds of no template = %v, %v", bs, err)
	}

	for i := range 5 {
		e := templates.LogEntry{Timestamp: now.Add(time.Duration(i) * time.Second), Level: templates.LogInfo, Message: string(rune('a' + i)), Step: "1"}
		if err := s.AppendLogs(ctx, "b1", e); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendLogs(ctx, "b1", templates.LogEntry{Level: templates.LogWarn, Message: "f"}, templates.LogEntry{Level: templates.LogError, Message: "g"}); err != nil {
		t.Fatal(err)
	}
	logs, err := other.Logs(ctx, "b1", 3)
	if err != nil || len(logs) != 4 || logs[0].Message != "d" || logs[0].Step != "1" || !logs[0].Timestamp.Equal(now.Add(3*time.Second)) ||
		logs[3].Message != "g" || logs[3].Level != templates.LogError {
		t.Fatalf("Logs(3) = %+v, %v; want d, e, f, g", logs, err)
	}
	if logs, err := other.Logs(ctx, "b1", 7); err != nil || logs == nil || len(logs) != 0 {
		t.Fatalf("Logs past the end = %#v, %v; want empty non-nil", logs, err)
	}
	if logs, err := s.Logs(ctx, "b2", 0); err != nil || logs == nil || len(logs) != 0 {
		t.Fatalf("Logs of a build without logs = %#v, %v; want empty non-nil", logs, err)
	}

	if err := other.DeleteTemplate(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := other.DeleteTemplate(ctx, "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("second delete: err = %v, want not found", err)
	}
	for _, id := range []string{"b1", "b2"} {
		if _, err := s.GetBuild(ctx, id); !errdefs.IsNotFound(err) {
			t.Fatalf("build %s after template delete: %v", id, err)
		}
	}
	if logs, err := s.Logs(ctx, "b1", 0); err != nil || len(logs) != 0 {
		t.Fatalf("logs after template delete = %v, %v", logs, err)
	}
	if err := s.CreateTemplate(ctx, &templates.Template{ID: "z", Aliases: []string{"alpha"}}); err != nil {
		t.Fatalf("alias of a deleted template is still taken: %v", err)
	}
}

// testFinishBuild holds FinishBuild to one change of a build and its
// template: both or, when either function fails, neither.
func testFinishBuild(t *testing.T, open Open) {
	ctx := context.Background()
	s, other := open(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.CreateTemplate(ctx, &templates.Template{ID: "f", Aliases: []string{"fin"}, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"f1", "f2"} {
		if err := s.CreateBuild(ctx, &templates.Build{ID: id, TemplateID: "f", Status: templates.BuildBuilding, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	ready := func(b *templates.Build) error { b.Status = templates.BuildReady; return nil }
	tag := func(id string) func(*templates.Template) error {
		return func(tm *templates.Template) error {
			tm.Tags = map[string]templates.Tag{templates.DefaultTag: {BuildID: id, CreatedAt: now}}
			return nil
		}
	}
	failing := errors.New("no")
	if _, err := s.FinishBuild(ctx, "f1", ready, func(*templates.Template) error { return failing }); !errors.Is(err, failing) {
		t.Fatalf("failing template change: err = %v", err)
	}
	if _, err := s.FinishBuild(ctx, "f1", func(*templates.Build) error { return failing }, tag("f1")); !errors.Is(err, failing) {
		t.Fatalf("failing build change: err = %v", err)
	}
	if b, err := other.GetBuild(ctx, "f1"); err != nil || b.Status != templates.BuildBuilding {
		t.Fatalf("a refused finish changed the build: %+v, %v", b, err)
	}
	if tm, err := other.GetTemplate(ctx, "f"); err != nil || len(tm.Tags) != 0 {
		t.Fatalf("a refused finish changed the template: %+v, %v", tm, err)
	}
	b, err := s.FinishBuild(ctx, "f1", ready, tag("f1"))
	if err != nil || b.Status != templates.BuildReady || b.ID != "f1" {
		t.Fatalf("FinishBuild = %+v, %v", b, err)
	}
	if b, err := other.GetBuild(ctx, "f1"); err != nil || b.Status != templates.BuildReady {
		t.Fatalf("finished build = %+v, %v", b, err)
	}
	if tm, err := other.GetTemplate(ctx, "f"); err != nil || tm.Tags[templates.DefaultTag].BuildID != "f1" || !slices.Equal(tm.Aliases, []string{"fin"}) {
		t.Fatalf("template after the finish = %+v, %v", tm, err)
	}
	if _, err := s.FinishBuild(ctx, "nope", ready, tag("nope")); !errdefs.IsNotFound(err) {
		t.Fatalf("finish of a missing build: err = %v, want not found", err)
	}
	// Two finishes of one template's builds at once: each lands whole.
	var wg sync.WaitGroup
	for _, st := range []templates.Store{s, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := st.FinishBuild(ctx, "f2", ready, func(tm *templates.Template) error {
				tm.Tags["v2"] = templates.Tag{BuildID: "f2", CreatedAt: now}
				return nil
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if tm, err := other.GetTemplate(ctx, "f"); err != nil || tm.Tags["v2"].BuildID != "f2" || tm.Tags[templates.DefaultTag].BuildID != "f1" {
		t.Fatalf("template after two finishes at once = %+v, %v", tm, err)
	}
}

// testBadIDs holds the stores to IDs that are untrusted strings: none
// names anything but the object of that ID.
func testBadIDs(t *testing.T, open Open) {
	ctx := context.Background()
	s, _ := open(t)
	bad := []string{"", ".", "..", "../x", "a/b", "../../etc/passwd"}
	for _, id := range bad {
		if _, err := s.GetTemplate(ctx, id); !errdefs.IsNotFound(err) {
			t.Errorf("GetTemplate(%q) err = %v, want not found", id, err)
		}
		if _, err := s.GetBuild(ctx, id); !errdefs.IsNotFound(err) {
			t.Errorf("GetBuild(%q) err = %v, want not found", id, err)
		}
		if err := s.CreateTemplate(ctx, &templates.Template{ID: id}); !errdefs.IsInvalid(err) {
			t.Errorf("CreateTemplate(%q) err = %v, want invalid", id, err)
		}
		if err := s.CreateBuild(ctx, &templates.Build{ID: id, TemplateID: "a"}); !errdefs.IsInvalid(err) {
			t.Errorf("CreateBuild(%q) err = %v, want invalid", id, err)
		}
	}
}

// testShared runs writers on both handles at once: aliases stay unique,
// read-modify-writes lose nothing, every log line is kept once.
func testShared(t *testing.T, open Open) {
	ctx := context.Background()
	a, b := open(t)
	stores := []templates.Store{a, b}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = stores[i%2].CreateTemplate(ctx, &templates.Template{ID: fmt.Sprintf("t%d", i), Aliases: []string{"contended"}})
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errdefs.IsAlreadyExists(err):
			t.Errorf("create t%d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d creates took one alias, want 1", won)
	}

	if err := a.CreateTemplate(ctx, &templates.Template{ID: "counter"}); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateBuild(ctx, &templates.Build{ID: "counted", TemplateID: "counter"}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		wg.Go(func() {
			s := stores[i%2]
			if _, err := s.UpdateTemplate(ctx, "counter", func(t *templates.Template) error { t.CPUCount++; return nil }); err != nil {
				t.Error(err)
			}
			if _, err := s.UpdateBuild(ctx, "counted", func(b *templates.Build) error { b.CPUCount++; return nil }); err != nil {
				t.Error(err)
			}
			for j := range 3 {
				if err := s.AppendLogs(ctx, "counted", templates.LogEntry{Message: fmt.Sprintf("%d-%d", i, j)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	tm, err := b.GetTemplate(ctx, "counter")
	if err != nil || tm.CPUCount != n {
		t.Fatalf("template after %d concurrent increments: %+v, %v", n, tm, err)
	}
	bd, err := b.GetBuild(ctx, "counted")
	if err != nil || bd.CPUCount != n {
		t.Fatalf("build after %d concurrent increments: %+v, %v", n, bd, err)
	}
	logs, err := a.Logs(ctx, "counted", 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	last := map[string]int{}
	for i, e := range logs {
		seen[e.Message]++
		var w, j int
		fmt.Sscanf(e.Message, "%d-%d", &w, &j)
		// One writer's lines keep their order.
		if prev, ok := last[fmt.Sprint(w)]; ok && j <= prev {
			t.Errorf("line %d %q after %d-%d", i, e.Message, w, prev)
		}
		last[fmt.Sprint(w)] = j
	}
	if len(logs) != 3*n || len(seen) != 3*n {
		t.Fatalf("%d log lines (%d distinct), want %d", len(logs), len(seen), 3*n)
	}
}
