package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// volumeMounter is a node.VolumeMounter over a fixed set of volumes
// (ID → team), recording who mounts what.
type volumeMounter struct {
	mu    sync.Mutex
	teams map[string]string
	users map[string][]string
}

func (v *volumeMounter) Acquire(sandboxID, teamID string, mounts []nodeapi.VolumeMount) ([]driver.Mount, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []driver.Mount
	var ids []string
	for _, m := range mounts {
		if v.teams[m.ID] != teamID {
			return nil, fmt.Errorf("volume %q: %w", m.ID, errdefs.ErrNotFound)
		}
		out = append(out, driver.Mount{Source: "/volumes/" + m.ID, Destination: m.Path, Type: "bind"})
		ids = append(ids, m.ID)
	}
	v.users[sandboxID] = ids
	return out, nil
}

func (v *volumeMounter) Release(sandboxID string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.users, sandboxID)
}

func (v *volumeMounter) usersOf() map[string][]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string][]string{}
	for k, ids := range v.users {
		out[k] = slices.Clone(ids)
	}
	return out
}

func TestVolumeMountsOfSandboxes(t *testing.T) {
	e := newEnv(t, fake.Config{})
	vm := &volumeMounter{teams: map[string]string{"v1": "team1", "v2": "team1", "other": "team2"}, users: map[string][]string{}}
	e.tune = func(c *node.Config) { c.Volumes = vm }
	a := e.start()
	ctx := context.Background()
	mounts := []nodeapi.VolumeMount{{ID: "v2", Path: "/mnt/z"}, {ID: "v1", Path: "/mnt/a"}}
	e.create(a, "sb1", func(r *nodeapi.CreateRequest) { r.Volumes = mounts })
	spec, ok := e.fake.Spec("sb1")
	if !ok {
		t.Fatal("no spec")
	}
	var dsts []string
	for _, m := range spec.Mounts {
		dsts = append(dsts, m.Destination)
	}
	if !slices.Equal(dsts, []string{"/.warren/envd", "/mnt/a", "/mnt/z"}) {
		t.Fatalf("mounts of the spec: %v, want envd's then the volumes by path", dsts)
	}
	if got := vm.usersOf()["sb1"]; !slices.Equal(got, []string{"v2", "v1"}) {
		t.Fatalf("acquired: %v", got)
	}
	// Another team's volume: refused, nothing left.
	_, err := a.Create(ctx, func() nodeapi.CreateRequest {
		r := createReq("sb2")
		r.Volumes = []nodeapi.VolumeMount{{ID: "other", Path: "/mnt"}}
		return r
	}())
	if !errdefs.IsNotFound(err) {
		t.Fatalf("a create with another team's volume: %v", err)
	}
	e.assertNoHostObjects("sb2")
	if _, ok := vm.usersOf()["sb2"]; ok {
		t.Fatal("a failed create keeps its volumes")
	}
	// Paused: still mounting them; after a restart of the agent too.
	if _, err := a.Pause(ctx, "sb1", nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	vm.users = map[string][]string{}
	a = e.start()
	if got := vm.usersOf()["sb1"]; len(got) != 2 {
		t.Fatalf("after a restart the paused sandbox's volumes are not held: %v", got)
	}
	if _, err := a.Resume(ctx, "sb1", nodeapi.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	if spec, _ := e.fake.Spec("sb1"); len(spec.Mounts) != 3 {
		t.Fatalf("the resumed sandbox's mounts: %v", spec.Mounts)
	}
	forks, err := a.Fork(ctx, "sb1", nodeapi.ForkRequest{IDs: []string{"fk1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := vm.usersOf()[forks[0].ID]; len(got) != 2 {
		t.Fatalf("the fork's copy does not hold the volumes: %v", got)
	}
	for _, id := range []string{"sb1", "fk1"} {
		if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
	}
	if got := vm.usersOf(); len(got) != 0 {
		t.Fatalf("killed sandboxes still hold volumes: %v", got)
	}
}

func TestVolumesOnANodeWithout(t *testing.T) {
	e := newEnv(t, fake.Config{})
	a := e.start()
	_, err := a.Create(context.Background(), func() nodeapi.CreateRequest {
		r := createReq("sb1")
		r.Volumes = []nodeapi.VolumeMount{{ID: "v1", Path: "/mnt"}}
		return r
	}())
	if !errdefs.IsUnsupported(err) {
		t.Fatalf("volumes on a node without: %v", err)
	}
	e.assertNoHostObjects("sb1")
}

func TestCheckVolumeMounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		paths []string
		ok    bool
	}{
		{[]string{"/mnt/data"}, true},
		{[]string{"/mnt/a", "/mnt/b", "/home/user/work"}, true},
		{[]string{"/tmp/x"}, true},
		{[]string{"/"}, false},
		{[]string{"/tmp"}, false},
		{[]string{"/etc"}, false},
		{[]string{"/etc/hosts"}, false},
		{[]string{"/proc"}, false},
		{[]string{"/proc/1"}, false},
		{[]string{"/dev/shm/x"}, false},
		{[]string{"/sys/fs"}, false},
		{[]string{"/.warren/envd"}, false},
		{[]string{"relative"}, false},
		{[]string{"/mnt/../etc"}, false},
		{[]string{"/mnt/"}, false},
		{[]string{"/mnt,x"}, false},
		{[]string{"/mnt/a", "/mnt/a"}, false},
		{[]string{"/mnt/a", "/mnt/a/b"}, false},
		{[]string{"/mnt/a/b", "/mnt/a"}, false},
		{[]string{"/mnt/a", "/mnt/ab"}, true},
	} {
		var ms []nodeapi.VolumeMount
		for i, p := range tc.paths {
			ms = append(ms, nodeapi.VolumeMount{ID: fmt.Sprint("v", i), Path: p})
		}
		err := nodeapi.CheckVolumeMounts(ms)
		if (err == nil) != tc.ok || (err != nil && !errdefs.IsInvalid(err)) {
			t.Errorf("%v: %v, want ok=%v", tc.paths, err, tc.ok)
		}
	}
	many := make([]nodeapi.VolumeMount, nodeapi.MaxVolumeMounts+1)
	for i := range many {
		many[i] = nodeapi.VolumeMount{ID: "v", Path: fmt.Sprint("/mnt/", i)}
	}
	if err := nodeapi.CheckVolumeMounts(many); !errdefs.IsInvalid(err) {
		t.Errorf("%d mounts: %v", len(many), err)
	}
}
