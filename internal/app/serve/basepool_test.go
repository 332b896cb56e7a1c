package serve

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/lifecycle"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store/storetest"
)

func TestAutoPoolSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cpus        int
		mem, member int64
		want        int
	}{
		{cpus: 2, mem: 24 << 10, member: 512, want: 2}, // this development VM
		{cpus: 1, mem: 8 << 10, member: 512, want: 1},
		{cpus: 64, mem: 256 << 10, member: 512, want: MaxAutoPool},
		{cpus: 8, mem: 4 << 10, member: 512, want: 1},   // memory bound: 4 GiB / 8 / 512 MiB
		{cpus: 8, mem: 2 << 10, member: 512, want: 0},   // not even one fits: off
		{cpus: 4, mem: 16 << 10, member: 1024, want: 2}, // bigger members
		{cpus: 2, mem: 0, member: 512, want: 0},         // memory unknown: off
	} {
		if got, why := AutoPoolSize(tc.cpus, tc.mem, tc.member); got != tc.want || why == "" {
			t.Errorf("AutoPoolSize(%d CPUs, %d MiB, %d MiB) = %d (%s), want %d", tc.cpus, tc.mem, tc.member, got, why, tc.want)
		}
	}
}

func TestParsePoolSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{"auto": PoolSizeAuto, "0": 0, "3": 3, "100": 100} {
		if got, err := ParsePoolSize(in); err != nil || got != want {
			t.Errorf("ParsePoolSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "101", "two", "Auto"} {
		if _, err := ParsePoolSize(in); err == nil {
			t.Errorf("ParsePoolSize(%q): no error", in)
		}
	}
}

// TestSetBasePool: the base pool is set with the resources the API gives
// a default create of base (so such creates claim its members), sized
// from the host for PoolSizeAuto, and removed by 0, also when an earlier
// start left one in the node's pools.json. The code interpreter's
// template is not offered here, so it has no pool and no error.
func TestSetBasePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	n, tmpl, _, closeNode, err := fakeNode(ctx, t, dir)
	if err != nil {
		t.Fatal(err)
	}
	pl := n.(nodeapi.Pooler)
	st := storetest.SQLite(t)
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: n})
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{Store: st, Lifecycle: lc, Templates: tmpl, AdminToken: "adm", Pools: pl})
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if err := setDefaultPools(ctx, PoolSizeAuto, pl, tmpl, api, log); err != nil {
		t.Fatal(err)
	}
	base, _ := tmpl.Resolve(ctx, "", "base")
	res := api.SandboxResources(base)
	mem, err := hostMemoryMiB()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := AutoPoolSize(runtime.NumCPU(), mem, res.MemoryMB)
	if got := pl.Pools()["base"].Size; got != want {
		t.Errorf("automatic base pool size %d, want %d", got, want)
	}
	if p, ok := pl.Pools()[noderole.CodeInterpreterID]; ok {
		t.Errorf("a pool of the code interpreter's template, which is not offered: %+v", p)
	}
	if !strings.Contains(logs.String(), `msg="default warm pool" template=base`) || !strings.Contains(logs.String(), "chosen_by=\"auto: ") {
		t.Errorf("the log does not say what was chosen:\n%s", logs.String())
	}
	if want > 0 {
		if _, ok := pl.Reserve(base, res); !ok {
			// The pool fills in the background: give it its members first.
			waitBasePool(t, pl)
			if _, ok := pl.Reserve(base, res); !ok {
				t.Error("a default create of base finds no member of the base pool")
			}
		}
	}
	if err := setDefaultPools(ctx, 3, pl, tmpl, api, log); err != nil {
		t.Fatal(err)
	}
	if got := pl.Pools()["base"].Size; got != 3 {
		t.Errorf("base pool size %d after --pool-size 3", got)
	}
	closeNode()

	// The next start with the pool off removes the pool it restored.
	n2, _, _, closeNode2, err := fakeNode(ctx, t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer closeNode2()
	pl2 := n2.(nodeapi.Pooler)
	if _, ok := pl2.Pools()["base"]; !ok {
		t.Fatal("the base pool was not restored from pools.json")
	}
	if err := setDefaultPools(ctx, 0, pl2, tmpl, api, log); err != nil {
		t.Fatal(err)
	}
	if p, ok := pl2.Pools()["base"]; ok {
		t.Errorf("base pool still there after --pool-size 0: %+v", p)
	}
}

// waitBasePool waits (bounded, generously) until the base pool has a
// ready member.
func waitBasePool(t *testing.T, pl nodeapi.Pooler) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for pl.Pools()["base"].Ready == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("base pool has no ready member within a minute: %+v", pl.Pools()["base"])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSetDefaultPoolsCodeInterpreter: when the code interpreter's
// template is offered, its pool is on by default too, sized from the host
// for its own members (1 GiB each), with the resources of its default
// create; 0 turns both pools off.
func TestSetDefaultPoolsCodeInterpreter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n, _, _, closeNode, err := fakeNode(ctx, t, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer closeNode()
	tmpls := noderole.StaticTemplates{
		"base": {ID: "base", BuildID: "base", RootFS: "/nonexistent/fake-rootfs"},
		noderole.CodeInterpreterID: {ID: noderole.CodeInterpreterID, BuildID: "ci1", RootFS: "/nonexistent/fake-rootfs",
			Resources: sandbox.Resources{MemoryMB: 1024}},
	}
	pl := n.(nodeapi.Pooler)
	st := storetest.SQLite(t)
	lc, err := lifecycle.New(lifecycle.Config{Store: st, Node: n})
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{Store: st, Lifecycle: lc, Templates: tmpls, AdminToken: "adm", Pools: pl})
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	if err := setDefaultPools(ctx, PoolSizeAuto, pl, tmpls, api, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	mem, err := hostMemoryMiB()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := AutoPoolSize(runtime.NumCPU(), mem, 1024)
	p, ok := pl.Pools()[noderole.CodeInterpreterID]
	if !ok || p.Size != want || p.BuildID != "ci1" {
		t.Errorf("code interpreter pool %+v (there: %v), want size %d of build ci1", p, ok, want)
	}
	if ci := tmpls[noderole.CodeInterpreterID]; want > 0 {
		res := api.SandboxResources(ci)
		deadline := time.Now().Add(time.Minute)
		for pl.Pools()[noderole.CodeInterpreterID].Ready == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if res.MemoryMB != 1024 {
			t.Errorf("a default create of the code interpreter gets %d MiB, want its template's 1024", res.MemoryMB)
		}
		if _, ok := pl.Reserve(ci, res); !ok {
			t.Error("a default create of the code interpreter finds no member of its pool")
		}
	}
	if !strings.Contains(logs.String(), `msg="default warm pool" template=`+noderole.CodeInterpreterID) {
		t.Errorf("the log does not say the code interpreter's pool:\n%s", logs.String())
	}
	if err := setDefaultPools(ctx, 0, pl, tmpls, api, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"base", noderole.CodeInterpreterID} {
		if p, ok := pl.Pools()[name]; ok {
			t.Errorf("pool of %s after --pool-size 0: %+v", name, p)
		}
	}
}
