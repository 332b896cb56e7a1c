package noderole

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/warren-sandbox/warren/internal/testenv"
)

// A tenant's template keeps a set-user-ID root binary (built from its
// Dockerfile) under the data dir. Another user of the host must not reach
// it through a data dir made 0755 beforehand, as systemd's
// StateDirectory= and a Kubernetes hostPath make them.
func TestDataDirKeepsTenantBinariesFromHostUsers(t *testing.T) {
	testenv.NeedRoot(t, "runs a binary as another host user")
	parent, err := os.MkdirTemp("", "warren-datadir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(parent, "data")
	bin := filepath.Join(dataDir, "builds", "b1", "rootfs", "usr", "bin", "suid")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	asNobody := func() error {
		cmd := exec.Command(bin)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		return cmd.Run()
	}
	if err := asNobody(); err != nil {
		t.Fatalf("before: nobody could not run the tenant's binary (%v), so this test shows nothing", err)
	}

	if err := privateDataDir(dataDir, testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("data dir mode %v, want 0700", got)
	}
	if err := asNobody(); !errors.Is(err, os.ErrPermission) {
		t.Errorf("nobody ran the tenant's set-user-ID binary under the data dir: %v", err)
	}
	if err := privateDataDir(dataDir, testenv.Logger(t)); err != nil {
		t.Errorf("a second start on the narrowed dir: %v", err)
	}
}

func TestDataDirRefusesAFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := privateDataDir(f, testenv.Logger(t)); err == nil {
		t.Fatal("a file as the data dir was accepted")
	}
}
