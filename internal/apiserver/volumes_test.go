package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/mountinfo"
	nodevolumes "github.com/warren-sandbox/warren/internal/node/volumes"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/testenv"
	"github.com/warren-sandbox/warren/internal/volumes"
)

// oneNode is the volumes' one node of these tests.
type oneNode struct{ vm *nodevolumes.Manager }

func (o oneNode) VolumeCandidates(context.Context, int64) ([]string, error) {
	return []string{"n1"}, nil
}
func (o oneNode) VolumeNode(_ context.Context, id string) (nodeapi.VolumeService, error) {
	if id != "n1" {
		return nil, fmt.Errorf("node %q: %w", id, errdefs.ErrNotFound)
	}
	return o.vm, nil
}

type volumeEnv struct {
	*env
	vm   *nodevolumes.Manager
	root string
	mu   sync.Mutex
	reqs []nodeapi.CreateRequest // the creates the node got
}

// newVolumeEnv is newEnv whose server keeps volumes on a real volume
// manager (ext4 images over loop devices: root).
func newVolumeEnv(t *testing.T) *volumeEnv {
	t.Helper()
	testenv.NeedRoot(t, "volumes mount ext4 images over loop devices")
	e := newEnv(t)
	root := filepath.Join(t.TempDir(), "volumes")
	t.Cleanup(func() {
		mps, _ := mountinfo.Under(root, true)
		for _, mp := range mps {
			_ = rootfs.UnmountPath(mp)
		}
	})
	vm, err := nodevolumes.New(context.Background(), nodevolumes.Config{Root: root, MinFreeDiskMB: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	vs, err := volumes.New(volumes.Config{Store: e.st.(*store.SQL), Nodes: oneNode{vm}, Lifecycle: e.lc})
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{Store: e.st, Lifecycle: e.lc, Templates: staticTemplates{}, AdminToken: adminToken, Volumes: vs})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Close()
	e.srv = httptest.NewServer(conformTo(t, api))
	t.Cleanup(e.srv.Close)
	ve := &volumeEnv{env: e, vm: vm, root: root}
	e.node.BeforeCreate = func(req nodeapi.CreateRequest) {
		ve.mu.Lock()
		ve.reqs = append(ve.reqs, req)
		ve.mu.Unlock()
	}
	return ve
}

type volumeAndToken struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token"`
	SizeMB   int64  `json:"sizeMB"`
}

func (e *volumeEnv) newVolume(key, name string) volumeAndToken {
	e.t.Helper()
	r := e.do("POST", "/volumes", key, `{"name":"`+name+`","sizeMB":16}`)
	if r.status != 201 {
		e.t.Fatalf("create volume %s: %d %s", name, r.status, r.body)
	}
	var v volumeAndToken
	if err := json.Unmarshal(r.body, &v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

func TestVolumeAPI(t *testing.T) {
	e := newVolumeEnv(t)
	v := e.newVolume(e.key1, "data")
	if v.Name != "data" || !strings.HasPrefix(v.Token, "wvt_") || v.SizeMB != 16 || !sandbox.ValidID(v.VolumeID) {
		t.Fatalf("created: %+v", v)
	}
	for _, tc := range []struct {
		method, path, key, body string
		code                    int
	}{
		{"POST", "/volumes", e.key1, `{"name":"data"}`, 409},                   // names are unique per team
		{"POST", "/volumes", e.key2, `{"name":"data","sizeMB":16}`, 201},       // but not across teams
		{"POST", "/volumes", e.key1, `{"name":"../x"}`, 400},                   // a name is no path
		{"POST", "/volumes", e.key1, `{"name":""}`, 400},                       //
		{"POST", "/volumes", e.key1, `{"name":"big","sizeMB":999999999}`, 400}, // past the team's size bound
		{"POST", "/volumes", e.key1, `{"name":"neg","sizeMB":-1}`, 400},        //
		{"GET", "/volumes/" + v.VolumeID, e.key2, "", 404},                     // another team's volume
		{"DELETE", "/volumes/" + v.VolumeID, e.key2, "", 404},                  //
		{"GET", "/volumes/nope", e.key1, "", 404},                              //
		{"GET", "/volumes", "", "", 401},                                       //
		{"DELETE", "/volumes/" + v.VolumeID + "?force=maybe", e.key1, "", 400},
	} {
		if r := e.do(tc.method, tc.path, tc.key, tc.body); r.status != tc.code {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, r.status, r.body, tc.code)
		}
	}
	r := e.do("GET", "/volumes/"+v.VolumeID, e.key1, "")
	var got volumeAndToken
	json.Unmarshal(r.body, &got)
	if r.status != 200 || got != v {
		t.Fatalf("get: %d %s, want %+v", r.status, r.body, v)
	}
	r = e.do("GET", "/volumes", e.key1, "")
	if r.status != 200 || !strings.Contains(string(r.body), `"volumeID":"`+v.VolumeID+`"`) || strings.Contains(string(r.body), "token") {
		t.Fatalf("list: %d %s", r.status, r.body)
	}

	// The team's limits: the storage quota (429) and the count.
	e.do("PATCH", "/admin/teams/t1", "", `{"limits":{"maxVolumeStorageMB":40,"maxVolumes":2}}`, "X-Admin-Token", adminToken)
	if r := e.do("POST", "/volumes", e.key1, `{"name":"two","sizeMB":32}`); r.status != 429 || !strings.Contains(string(r.body), "volume storage") {
		t.Fatalf("over the storage quota: %d %s", r.status, r.body)
	}
	e.newVolume(e.key1, "second")
	if r := e.do("POST", "/volumes", e.key1, `{"name":"third","sizeMB":1}`); r.status != 429 || !strings.Contains(string(r.body), "maximum number of volumes") {
		t.Fatalf("over the count: %d %s", r.status, r.body)
	}

	if r := e.do("DELETE", "/volumes/"+v.VolumeID, e.key1, ""); r.status != 204 {
		t.Fatalf("destroy: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/volumes/"+v.VolumeID, e.key1, ""); r.status != 404 {
		t.Fatalf("get after destroy: %d %s", r.status, r.body)
	}
	if r := e.do("DELETE", "/volumes/"+v.VolumeID, e.key1, ""); r.status != 404 {
		t.Fatalf("second destroy: %d %s", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(e.root, "vol-"+v.VolumeID)); !os.IsNotExist(err) {
		t.Fatalf("the destroyed volume is on the node: %v", err)
	}
}

// TestVolumeContentAttacks: a token opens its own volume only, and no
// path leaves the volume.
func TestVolumeContentAttacks(t *testing.T) {
	e := newVolumeEnv(t)
	a := e.newVolume(e.key1, "a")
	b := e.newVolume(e.key2, "b")
	base := "/volumecontent/" + a.VolumeID
	for _, tc := range []struct {
		hdr  []string
		code int
	}{
		{nil, 401},
		{[]string{"X-API-Key", e.key1}, 401}, // the team's key is not the volume's token
		{bearer(b.Token), 401},               // another volume's token
		{bearer(a.Token + "x"), 401},
		{bearer(a.Token), 200},
	} {
		if r := e.do("GET", base+"/dir?path=/", "", "", tc.hdr...); r.status != tc.code {
			t.Errorf("list with %v: %d %s, want %d", tc.hdr, r.status, r.body, tc.code)
		}
	}
	// What a sandbox may leave in its volume: links out of it.
	data := filepath.Join(e.root, "vol-"+a.VolumeID, "fs", "data")
	os.Symlink("/etc", filepath.Join(data, "etc-link"))
	os.Symlink("../../../../../../../../etc/hostname", filepath.Join(data, "up-link"))
	for _, p := range []string{"etc-link/hostname", "up-link", "../../../../etc/hostname", "/../etc/hostname", "%2e%2e/%2e%2e/etc/hostname"} {
		r := e.do("GET", base+"/file?path="+p, "", "", bearer(a.Token)...)
		if r.status == 200 {
			t.Errorf("read %q through the content API: %q", p, r.body)
		}
		if r.status != 404 {
			t.Errorf("read %q: %d %s, want 404", p, r.status, r.body)
		}
	}
	if r := e.do("PUT", base+"/file?path=etc-link/planted", "", "x", bearer(a.Token)...); r.status != 404 {
		t.Errorf("write through a link out: %d %s", r.status, r.body)
	}
	if _, err := os.Stat("/etc/planted"); err == nil {
		t.Fatal("a write through the content API planted /etc/planted")
	}
	if r := e.do("DELETE", base+"/path?path=/..", "", "", bearer(a.Token)...); r.status != 400 {
		t.Errorf("remove of the volume's root: %d %s", r.status, r.body)
	}
}

func TestVolumeContent(t *testing.T) {
	e := newVolumeEnv(t)
	v := e.newVolume(e.key1, "data")
	base, tok := "/volumecontent/"+v.VolumeID, bearer(v.Token)
	call := func(method, path, body string) result {
		t.Helper()
		return e.do(method, base+path, "", body, tok...)
	}
	if r := call("POST", "/dir?path=/a/b&force=true&mode=0o700", ""); r.status != 201 || !strings.Contains(string(r.body), `"mode":448`) {
		t.Fatalf("make dir: %d %s", r.status, r.body)
	}
	if r := call("POST", "/dir?path=/a/b", ""); r.status != 409 {
		t.Fatalf("make an existing dir: %d %s", r.status, r.body)
	}
	if r := call("POST", "/dir?path=/x/y", ""); r.status != 404 {
		t.Fatalf("make a dir in a missing one: %d %s", r.status, r.body)
	}
	r := call("PUT", "/file?path=/a/b/f.txt", "hello")
	var ent map[string]any
	json.Unmarshal(r.body, &ent)
	if r.status != 201 || ent["path"] != "/a/b/f.txt" || ent["type"] != "file" || ent["size"] != float64(5) || ent["uid"] != float64(1000) {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	if r := call("PUT", "/file?path=/a/b/f.txt", "again"); r.status != 409 {
		t.Fatalf("write over a file without force: %d %s", r.status, r.body)
	}
	if r := call("PUT", "/file?path=/a/b/f.txt&force=true", "again"); r.status != 201 {
		t.Fatalf("write with force: %d %s", r.status, r.body)
	}
	if r := call("GET", "/file?path=a/b/f.txt", ""); r.status != 200 || string(r.body) != "again" || r.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("read: %d %q", r.status, r.body)
	}
	if r := call("GET", "/file?path=/a", ""); r.status != 400 {
		t.Fatalf("read of a directory: %d %s", r.status, r.body)
	}
	if r := call("GET", "/path?path=/a/b/f.txt", ""); r.status != 200 || !strings.Contains(string(r.body), `"name":"f.txt"`) {
		t.Fatalf("stat: %d %s", r.status, r.body)
	}
	if r := call("PATCH", "/path?path=/a/b/f.txt", `{"mode":384,"uid":0}`); r.status != 200 || !strings.Contains(string(r.body), `"mode":384`) || !strings.Contains(string(r.body), `"uid":0`) {
		t.Fatalf("set metadata: %d %s", r.status, r.body)
	}
	if r := call("GET", "/dir?path=/&depth=3", ""); r.status != 200 || strings.Count(string(r.body), `"path"`) != 3 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if r := call("GET", "/dir?path=/&depth=zero", ""); r.status != 400 {
		t.Fatalf("list with a bad depth: %d %s", r.status, r.body)
	}
	// A write past the volume's size: 413, and nothing of it is left.
	big := strings.Repeat("x", 64<<20)
	if r := call("PUT", "/file?path=/big", big); r.status != 413 || !strings.Contains(string(r.body), "is full") {
		t.Fatalf("a write past the size: %d %s", r.status, r.body)
	}
	if r := call("GET", "/path?path=/big", ""); r.status != 404 {
		t.Fatalf("a write that did not fit left a file: %d %s", r.status, r.body)
	}
	if r := call("DELETE", "/path?path=/a", ""); r.status != 204 {
		t.Fatalf("remove: %d %s", r.status, r.body)
	}
	if r := call("DELETE", "/path?path=/a", ""); r.status != 404 {
		t.Fatalf("second remove: %d %s", r.status, r.body)
	}
}

// TestVolumeMounts: a create mounts volumes of its own team by name, the
// node is asked by ID; a volume in use is destroyed only with force,
// which kills its sandboxes first.
func TestVolumeMounts(t *testing.T) {
	e := newVolumeEnv(t)
	v := e.newVolume(e.key1, "data")
	e.newVolume(e.key2, "theirs")
	for _, tc := range []struct {
		body string
		code int
	}{
		{`{"templateID":"base","volumeMounts":[{"name":"theirs","path":"/mnt"}]}`, 404}, // another team's volume
		{`{"templateID":"base","volumeMounts":[{"name":"nope","path":"/mnt"}]}`, 404},
		{`{"templateID":"base","volumeMounts":[{"name":"data","path":"/proc/x"}]}`, 400},
		{`{"templateID":"base","volumeMounts":[{"name":"data","path":"mnt"}]}`, 400},
		{`{"templateID":"base","volumeMounts":[{"name":"data","path":"/mnt"},{"name":"data","path":"/mnt/x"}]}`, 400},
		{`{"templateID":"base","volumeMounts":[{"name":"","path":"/mnt"}]}`, 400},
	} {
		if r := e.do("POST", "/sandboxes", e.key1, tc.body); r.status != tc.code {
			t.Errorf("create %s: %d %s, want %d", tc.body, r.status, r.body, tc.code)
		}
	}
	r := e.do("POST", "/v2/sandboxes", e.key1, `{"templateID":"base","volumeMounts":[{"name":"data","path":"/mnt/data"}]}`)
	if r.status != 201 {
		t.Fatalf("create with a volume: %d %s", r.status, r.body)
	}
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	json.Unmarshal(r.body, &sb)
	e.mu.Lock()
	last := e.reqs[len(e.reqs)-1]
	e.mu.Unlock()
	if len(last.Volumes) != 1 || last.Volumes[0] != (nodeapi.VolumeMount{ID: v.VolumeID, Path: "/mnt/data"}) {
		t.Fatalf("the node was asked for %+v", last.Volumes)
	}
	if r := e.do("GET", "/sandboxes/"+sb.SandboxID, e.key1, ""); !strings.Contains(string(r.body), `"volumeMounts":[{"name":"data","path":"/mnt/data"}]`) {
		t.Fatalf("the sandbox's volume mounts: %s", r.body)
	}
	if r := e.do("DELETE", "/volumes/"+v.VolumeID, e.key1, ""); r.status != 409 || !strings.Contains(string(r.body), sb.SandboxID) {
		t.Fatalf("destroy of a volume in use: %d %s", r.status, r.body)
	}
	if r := e.do("DELETE", "/volumes/"+v.VolumeID+"?force=true", e.key1, ""); r.status != 204 {
		t.Fatalf("forced destroy: %d %s", r.status, r.body)
	}
	got, err := e.st.GetSandbox(context.Background(), sb.SandboxID)
	if err != nil || got.State != sandbox.StateKilled || got.KillReason != sandbox.KillVolumeDeleted {
		t.Fatalf("after a forced destroy the sandbox is %v (%v), %v", got.State, got.KillReason, err)
	}
}
