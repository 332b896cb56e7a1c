package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/e2e/e2eserve"
	"github.com/warren-sandbox/warren/pkg/client"
)

// warmIso names this file's runsc server's host objects apart from every
// other test's.
var warmIso = e2eserve.Isolation{CgroupRoot: fmt.Sprintf("warren-warmtest-%d", os.Getpid()),
	Table: fmt.Sprintf("warrenwarmtest%d", os.Getpid()), CIDR: "100.71.0.0/16", VethPrefix: "wwm"}

// adminGet GETs an admin route of the server.
func adminGet(t *testing.T, url, token, path string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+path, nil)
	req.Header.Set("X-Admin-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return string(b)
}

// TestServeWarmPoolRunsc: `warren serve` with no pool flag keeps a warm
// pool of base sized from the host and says so in its log; a create of
// base claims a member; a graceful stop (what SIGTERM does) leaves no
// runsc container, cgroup or network namespace of any pool member.
func TestServeWarmPoolRunsc(t *testing.T) {
	const key, admin = "e2b_7761726d00000000000000000000000000000001", "warm-admin-0123456789abcdef0123456789"
	s := startServeRunsc(t, key, warmIso, "--admin-token", admin)
	m := regexp.MustCompile(`msg="default warm pool" template=base size=(\d+) chosen_by="auto: [^"]+"`).FindStringSubmatch(s.errb.String())
	if m == nil {
		t.Fatalf("no startup log line saying the base pool's automatic size:\n%s", s.errb.String())
	}
	size := m[1]
	e2eserve.Require(t, size != "0", "the automatic pool size of this host is 0")
	const ready = `"templateID":"base","buildID":`
	deadline := time.Now().Add(5 * time.Minute)
	for {
		pools := adminGet(t, s.url, admin, "/admin/pools")
		if strings.Contains(pools, ready) && strings.Contains(pools, `"size":`+size+`,"ready":`+size) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("base pool not full within 5 minutes: %s", pools)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c := client.New(s.url, key)
	sb, err := c.Create(context.Background(), client.NewSandbox{TemplateID: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if metrics := adminGet(t, s.url, admin, "/metrics"); !strings.Contains(metrics, `sandbox_pool_claims_total{result="hit",template="base"} 1`) {
		t.Errorf("the create was no pool hit:\n%s", grepLines(metrics, "sandbox_pool_claims_total"))
	}
	if _, err := c.Kill(context.Background(), sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	runtimeRoot := filepath.Join(s.dataDir, "runsc", "runtime")
	if n := len(runscContainers(t, runtimeRoot)); n == 0 {
		t.Fatal("no runsc container of the pool before the stop")
	}
	s.stop()
	if ids := runscContainers(t, runtimeRoot); len(ids) > 0 {
		t.Errorf("runsc containers left after a graceful stop: %v", ids)
		for _, id := range ids { // leave nothing running on the host
			exec.Command(os.Getenv("WARREN_RUNSC"), "--root", runtimeRoot, "delete", "-force", id).Run()
		}
	}
	if cgs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", warmIso.CgroupRoot, "sbx-*")); len(cgs) > 0 {
		t.Errorf("sandbox cgroups left after a graceful stop: %v", cgs)
	}
	if nss, _ := os.ReadDir(filepath.Join("/run/warren", warmIso.Table, "netns")); len(nss) > 0 {
		t.Errorf("network namespaces left after a graceful stop: %v", nss)
	}
}

// runscContainers lists the containers runsc knows under its --root.
func runscContainers(t *testing.T, root string) []string {
	t.Helper()
	out, err := exec.Command(os.Getenv("WARREN_RUNSC"), "--root", root, "list", "-quiet").CombinedOutput()
	if err != nil {
		t.Fatalf("runsc list: %v: %s", err, out)
	}
	return strings.Fields(string(out))
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
