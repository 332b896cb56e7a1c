//go:build e2e

package envde2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/testenv"
)

// TestSDKInGVisor runs the same SDK scripts against envd as the init of a
// gVisor sandbox (runsc, systrap platform, the base rootfs with its user
// `user`), in a network namespace of the test's own (host networking of
// runsc inside that namespace).
func TestSDKInGVisor(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "needs root")
	envd := os.Getenv("WARREN_ENVD")
	runsc := os.Getenv("WARREN_RUNSC")
	rootfsTar := os.Getenv("WARREN_TEST_ROOTFS_TAR")
	for _, p := range []string{envd, runsc, rootfsTar} {
		_, err := os.Stat(p)
		testenv.Require(t, p != "" && err == nil, "needs $WARREN_ENVD, $WARREN_RUNSC and $WARREN_TEST_ROOTFS_TAR (make build base-rootfs)")
	}
	node, err := exec.LookPath("node")
	testenv.Require(t, err == nil, "needs node")
	_, err = os.Stat("../node_modules/e2b")
	testenv.Require(t, err == nil, "e2e/node_modules/e2b missing (npm ci in e2e/)")

	base := t.TempDir()
	rootfs := filepath.Join(base, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, ".warren"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", rootfsTar, "-C", rootfs).CombinedOutput(); err != nil {
		t.Fatalf("extract rootfs: %v: %s", err, out)
	}
	// Work directories of user `user` (uid 1000 in the base rootfs).
	for _, s := range scripts {
		d := filepath.Join(rootfs, "home/user", "w-"+strings.TrimSuffix(s, ".mjs"))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	writeSpec(t, base, envd)

	ns := netns(t)
	id := "wenvd-" + filepath.Base(base)
	state := filepath.Join(base, "state")
	t.Cleanup(func() {
		_ = exec.Command(runsc, "--root", state, "kill", id, "KILL").Run()
		_ = exec.Command(runsc, "--root", state, "delete", "-force", id).Run()
	})
	cmd := exec.Command("ip", "netns", "exec", ns, runsc, "--root", state, "--network=host", "--platform=systrap",
		"--ignore-cgroups", "run", "--bundle", base, id)
	startAndWait(t, cmd)

	runScripts(t, node, ns, func(t *testing.T) string {
		return "/home/user/w-" + t.Name()[strings.LastIndex(t.Name(), "/")+1:]
	}, func(string) bool { return true })
}

// writeSpec writes a minimal OCI spec: envd as init, bind-mounted read-only
// at /.warren/envd, host network namespace (the test's), template env.
func writeSpec(t *testing.T, bundle, envd string) {
	t.Helper()
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID",
		"CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE", "CAP_SETFCAP", "CAP_MKNOD", "CAP_NET_RAW"}
	spec := map[string]any{
		"ociVersion": "1.0.0",
		"process": map[string]any{
			"user": map[string]any{"uid": 0, "gid": 0},
			"args": []string{"/.warren/envd", "--port", "49983", "--log-level", "debug"},
			"env":  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"cwd":  "/",
			"capabilities": map[string]any{
				"bounding": caps, "effective": caps, "permitted": caps,
			},
		},
		"root":     map[string]any{"path": "rootfs", "readonly": false},
		"hostname": "sandbox",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": []string{"nosuid", "noexec", "nodev", "ro"}},
			{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777"}},
			{"destination": "/.warren/envd", "type": "bind", "source": envd, "options": []string{"rbind", "ro"}},
		},
		"linux": map[string]any{
			"namespaces": []map[string]any{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}},
		},
	}
	b, err := json.MarshalIndent(spec, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
