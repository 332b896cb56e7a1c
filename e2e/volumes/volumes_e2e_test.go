//go:build e2e

// Package volumes tests volumes end to end (docs/volumes.md): E2B's
// Volume API through the unmodified JS SDK against `warren serve`
// (volumes.mjs), a crash of the server in the middle of a write, and,
// under `warren api` with two `warren node`s, sandboxes placed on the
// node that holds their volume.
package volumes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/pkg/client"
	"github.com/warren-sandbox/warren/pkg/e2b"
)

// The servers' host objects, apart from every other test's.
var (
	iso  = e2eserve.NewIsolation("vol", "100.120.0.0/16", "wv")
	isoA = e2eserve.NewIsolation("vola", "100.121.0.0/16", "xa")
	isoB = e2eserve.NewIsolation("volb", "100.122.0.0/16", "xb")
)

// TestMain removes the servers' cgroup roots and nftables tables at the end.
func TestMain(m *testing.M) { e2eserve.Main(m, iso, isoA, isoB) }

const (
	apiKey     = "e2b_0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"
	adminToken = "volumes-e2e-admin-token-0123456789abcdef"
	nodeToken  = "volumes-e2e-node-token-0123456789"
	apiAddr    = "127.0.0.1:5040"
)

func startServe(t *testing.T, dataDir, listen string, extra ...string) *e2eserve.Server {
	t.Helper()
	return e2eserve.Start(t, e2eserve.Options{DataDir: dataDir, Listen: listen, APIKey: apiKey, AdminToken: adminToken,
		Isolation: iso, ExtraArgs: extra})
}

// newTeam makes a team with the admin API and returns its key.
func newTeam(t *testing.T, apiURL, id string) string {
	t.Helper()
	code, b := e2eserve.Call(t, "POST", apiURL+"/admin/teams", map[string]string{"X-Admin-Token": adminToken}, `{"id":"`+id+`"}`)
	if code != 201 {
		t.Fatalf("create team %s: %d %s", id, code, b)
	}
	var out struct {
		APIKey string `json:"apiKey"`
	}
	json.Unmarshal(b, &out)
	return out.APIKey
}

// TestVolumesSDK runs volumes.mjs: every call of the SDK's Volume API,
// two sandboxes on one volume, the limits, the escapes, pause and
// snapshots, another team's attempts.
func TestVolumesSDK(t *testing.T) {
	e2eserve.Prerequisites(t)
	s := startServe(t, t.TempDir(), "", "--max-volume-size-mb", "32", "--max-volumes", "4")
	key2 := newTeam(t, s.Env["E2B_API_URL"], "volumes-other")
	out, code := s.Run(t, []string{"E2B_API_KEY2=" + key2}, "node", "volumes.mjs")
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "OK") {
		t.Fatalf("volumes.mjs: exit %d\n%s", code, out)
	}
}

// api calls the server at base with the team's key (or a volume's token).
func api(t *testing.T, method, url, auth string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(auth, "e2b_") {
		req.Header.Set("X-API-Key", auth)
	} else {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type volume struct {
	VolumeID string `json:"volumeID"`
	Token    string `json:"token"`
}

func createVolume(t *testing.T, base, name string) volume {
	t.Helper()
	code, b := api(t, "POST", base+"/volumes", apiKey, strings.NewReader(`{"name":"`+name+`"}`))
	if code != 201 {
		t.Fatalf("create volume: %d %s", code, b)
	}
	var v volume
	json.Unmarshal(b, &v)
	return v
}

func (v volume) put(t *testing.T, base, path, content string) {
	t.Helper()
	if code, b := api(t, "PUT", base+"/volumecontent/"+v.VolumeID+"/file?force=true&path="+path, v.Token, strings.NewReader(content)); code != 201 {
		t.Fatalf("write %s: %d %s", path, code, b)
	}
}

func (v volume) get(t *testing.T, base, path string) (int, string) {
	t.Helper()
	code, b := api(t, "GET", base+"/volumecontent/"+v.VolumeID+"/file?path="+path, v.Token, nil)
	return code, string(b)
}

// TestVolumeCrashDuringWrite: warren serve is killed (SIGKILL) in the
// middle of a streamed write; after a restart the file reads as it was
// before (never part of the new content), every write that was answered
// is there (the content API's and a sandbox's), and nothing of the cut
// write is left in the volume.
func TestVolumeCrashDuringWrite(t *testing.T) {
	e2eserve.Prerequisites(t)
	dir := t.TempDir()
	s := startServe(t, dir, "127.0.0.1:5001")
	base := s.Env["E2B_API_URL"]
	v := createVolume(t, base, "crash")
	v.put(t, base, "/f", "old")
	v.put(t, base, "/kept", "acknowledged")
	c := client.New(base, apiKey)
	ctx := context.Background()
	code, b := api(t, "POST", base+"/sandboxes", apiKey, strings.NewReader(`{"templateID":"base","timeout":600,"volumeMounts":[{"name":"crash","path":"/mnt/data"}]}`))
	if code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	var sb client.Sandbox
	json.Unmarshal(b, &sb)
	sh(t, cfgOf(s.Env), sb.SandboxID, "echo from-sandbox > /mnt/data/s && sync")

	// A streamed write, cut by the server's death.
	pr, pw := io.Pipe()
	sent := make(chan struct{})
	go func() {
		chunk := []byte(strings.Repeat("n", 1<<20))
		for i := 0; i < 8; i++ {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		close(sent)
		<-time.After(time.Hour) // hold the upload open until the server dies
	}()
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("PUT", base+"/volumecontent/"+v.VolumeID+"/file?force=true&path=/f", pr)
		req.Header.Set("Authorization", "Bearer "+v.Token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the cut write was answered %d", resp.StatusCode)
		}
		done <- err
	}()
	select {
	case <-sent:
	case <-time.After(2 * time.Minute):
		t.Fatal("the upload did not start")
	}
	// The write is in flight: its bytes are in the volume's staging
	// directory, not yet renamed into place.
	staging := filepath.Join(dir, "volumes", "vol-"+v.VolumeID, "fs", ".staging")
	e2eserve.WaitFor(t, "the upload in staging", 2*time.Minute, func() (bool, any) {
		ents, _ := os.ReadDir(staging)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && fi.Size() >= 1<<20 {
				return true, nil
			}
		}
		return false, ents
	})
	s.Cmd.Process.Kill()
	s.Cmd.Wait()
	pw.CloseWithError(io.ErrUnexpectedEOF)
	if err := <-done; err != nil && strings.Contains(err.Error(), "answered") {
		t.Fatal(err)
	}

	s2 := startServe(t, dir, "127.0.0.1:5001")
	base = s2.Env["E2B_API_URL"]
	if ents, err := os.ReadDir(staging); err != nil || len(ents) != 0 {
		t.Errorf("the cut write left %v in staging (%v)", ents, err)
	}
	for path, want := range map[string]string{"/f": "old", "/kept": "acknowledged", "/s": "from-sandbox\n"} {
		if code, got := v.get(t, base, path); code != 200 || got != want {
			t.Errorf("after the crash %s reads %d %q, want %q", path, code, got, want)
		}
	}
	code, b = api(t, "GET", base+"/volumecontent/"+v.VolumeID+"/dir?path=/", v.Token, nil)
	var entries []struct {
		Path string `json:"path"`
	}
	json.Unmarshal(b, &entries)
	var paths []string
	for _, e := range entries {
		paths = append(paths, e.Path)
	}
	slices.Sort(paths)
	if code != 200 || strings.Join(paths, " ") != "/f /kept /s" {
		t.Errorf("the volume after the crash lists %d %v, want /f /kept /s", code, paths)
	}
	// The sandbox was adopted with its volume mounted.
	if _, err := c.Get(ctx, sb.SandboxID); err != nil {
		t.Fatalf("the sandbox after the restart: %v", err)
	}
	if got := sh(t, cfgOf(s2.Env), sb.SandboxID, "cat /mnt/data/f"); got != "old" {
		t.Errorf("the sandbox reads %q after the restart", got)
	}
}

// sh runs cmd in sandbox id through the server at cfg and returns its
// stdout.
func sh(t *testing.T, cfg e2b.Config, id, cmd string) string {
	t.Helper()
	ctx := context.Background()
	sb, err := e2b.Connect(ctx, id, e2b.ConnectOptions{Config: cfg})
	if err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	r, err := sb.Commands.Run(ctx, cmd, e2b.RunOptions{})
	if err != nil {
		t.Fatalf("%s in %s: %v", cmd, id, err)
	}
	return r.Stdout
}

func cfgOf(env map[string]string) e2b.Config {
	return e2b.Config{APIKey: apiKey, APIURL: env["E2B_API_URL"], SandboxURL: env["E2B_SANDBOX_URL"], Domain: "localhost"}
}

// TestVolumePlacement: under warren api, a volume lives on one node; the
// sandboxes that mount it are placed there, share it, and its content
// calls reach it through the node RPC; while that node takes no
// sandboxes, a create that mounts the volume is refused with 429 naming
// it, and others go to the other node.
func TestVolumePlacement(t *testing.T) {
	e2eserve.RunscPrerequisites(t)
	dsn := storetest.PostgresSchema(t)
	base := e2eserve.NodesDir(t, "volumes-e2e-")
	e2eserve.NoRunscLeftUnder(t, base)
	a := e2eserve.StartAPI(t, e2eserve.APIOptions{Name: "warren api", Listen: apiAddr, DSN: dsn, APIKey: apiKey,
		AdminToken: adminToken, NodeToken: nodeToken, ExtraArgs: []string{"--max-volume-size-mb", "64"}})
	nodes := map[string]*e2eserve.Node{}
	for i, n := range []struct {
		id  string
		iso e2eserve.Isolation
	}{{"vol-a", isoA}, {"vol-b", isoB}} {
		nodes[n.id] = e2eserve.NewNode(e2eserve.NodeOptions{ID: n.id, RPCListen: fmt.Sprintf("127.0.0.1:%d", 5041+2*i),
			ProxyListen: fmt.Sprintf("127.0.0.1:%d", 5042+2*i), APIURL: "http://" + apiAddr, DataDir: filepath.Join(base, n.id),
			Token: nodeToken, Isolation: n.iso})
		nodes[n.id].Run(t)
	}
	a.Admin.WaitNodes(t, "both nodes ready", 3*time.Minute, func(m map[string]e2eserve.NodeInfo) bool {
		return m["vol-a"].Status == "ready" && m["vol-b"].Status == "ready"
	})
	url := a.URL
	v := createVolume(t, url, "placed")
	holder := ""
	for id := range nodes {
		if _, err := os.Stat(filepath.Join(base, id, "volumes", "vol-"+v.VolumeID)); err == nil {
			holder = id
		}
	}
	if holder == "" {
		t.Fatal("the volume is on no node's disk")
	}
	otherNode := "vol-a"
	if holder == "vol-a" {
		otherNode = "vol-b"
	}
	ctx := context.Background()
	create := func(body string) (int, client.Sandbox, []byte) {
		code, b := api(t, "POST", url+"/sandboxes", apiKey, strings.NewReader(body))
		var sb client.Sandbox
		json.Unmarshal(b, &sb)
		return code, sb, b
	}
	withVolume := `{"templateID":"base","timeout":600,"volumeMounts":[{"name":"placed","path":"/mnt/data"}]}`
	var sbs []client.Sandbox
	for range 2 {
		code, sb, b := create(withVolume)
		if code != 201 {
			t.Fatalf("create with the volume: %d %s", code, b)
		}
		sbs = append(sbs, sb)
	}
	running := nodes[holder].Running(t)
	for _, sb := range sbs {
		if !contains(running, sb.SandboxID) {
			t.Fatalf("sandbox %s is not on %s, which holds its volume (it runs %v)", sb.SandboxID, holder, running)
		}
	}
	cfg := cfgOf(a.Env)
	sh(t, cfg, sbs[0].SandboxID, "echo one > /mnt/data/x")
	if got := sh(t, cfg, sbs[1].SandboxID, "cat /mnt/data/x"); got != "one\n" {
		t.Fatalf("the second sandbox reads %q", got)
	}
	// The content API through the API, over the node RPC.
	if code, got := v.get(t, url, "/x"); code != 200 || got != "one\n" {
		t.Fatalf("content read through warren api: %d %q", code, got)
	}
	v.put(t, url, "/y", "two")
	if got := sh(t, cfg, sbs[0].SandboxID, "cat /mnt/data/y"); got != "two" {
		t.Fatalf("the sandbox reads %q of the content API's write", got)
	}
	// The volume's node drains: 429 naming it; others go elsewhere.
	a.Admin.Call(t, "POST", "/admin/nodes/"+holder+"/drain")
	code, _, b := create(withVolume)
	if code != 429 || !strings.Contains(string(b), `the node that holds volume \"placed\" takes no new sandboxes`) {
		t.Fatalf("create with the volume while its node drains: %d %s", code, b)
	}
	code, sb, b := create(`{"templateID":"base","timeout":600}`)
	if code != 201 || !contains(nodes[otherNode].Running(t), sb.SandboxID) {
		t.Fatalf("a create without volumes while %s drains: %d %s", holder, code, b)
	}
	a.Admin.Call(t, "POST", "/admin/nodes/"+holder+"/uncordon")
	if code, b := api(t, "DELETE", url+"/volumes/"+v.VolumeID, apiKey, nil); code != 409 {
		t.Fatalf("destroy of a volume in use: %d %s", code, b)
	}
	if code, b := api(t, "DELETE", url+"/volumes/"+v.VolumeID+"?force=true", apiKey, nil); code != 204 {
		t.Fatalf("forced destroy: %d %s", code, b)
	}
	if _, err := os.Stat(filepath.Join(base, holder, "volumes", "vol-"+v.VolumeID)); !os.IsNotExist(err) {
		t.Fatalf("the destroyed volume is on its node: %v", err)
	}
	c := client.New(url, apiKey)
	for _, sb := range sbs {
		if _, err := c.Get(ctx, sb.SandboxID); !client.IsNotFound(err) {
			t.Errorf("sandbox %s after the forced destroy of its volume: %v", sb.SandboxID, err)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
