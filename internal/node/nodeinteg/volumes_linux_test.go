package nodeinteg

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/driver/runsc"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/volumes"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

const volTeam = "team-v"

// volumeHost is a host whose agent mounts volumes of a Manager under the
// host's directory.
func volumeHost(t *testing.T) (*host, *node.Agent, *volumes.Manager) {
	t.Helper()
	h := newHost(t)
	vm, err := volumes.New(context.Background(), volumes.Config{Root: filepath.Join(h.dir, "volumes"), Logger: h.log(), MinFreeDiskMB: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	drv, err := runsc.New(runsc.Config{Path: h.runsc, StateDir: filepath.Join(h.dir, "runsc"), CgroupRoot: "/" + h.cgRoot, Logger: h.log()})
	if err != nil {
		t.Fatal(err)
	}
	return h, h.agentOn(drv, func(c *node.Config) { c.Volumes = vm }), vm
}

// volSandbox starts a sandbox of volTeam with mounts.
func volSandbox(t *testing.T, h *host, a *node.Agent, prefix string, mounts ...nodeapi.VolumeMount) *nodeapi.Sandbox {
	t.Helper()
	id := prefix + sandbox.NewID()[:10]
	t.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })
	req := h.createReq(id)
	req.TeamID, req.Volumes = volTeam, mounts
	sb, err := a.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return sb
}

func tokOf(sb *nodeapi.Sandbox) string { return "tok-" + sb.ID }

// sh runs cmd as the sandbox's user and returns its output (stderr
// included) and exit code.
func sh(t *testing.T, sb *nodeapi.Sandbox, cmd string) (string, int) {
	t.Helper()
	out, code := run(t, sb, tokOf(sb), "("+cmd+") 2>&1")
	return strings.TrimSpace(out), code
}

func mustSh(t *testing.T, sb *nodeapi.Sandbox, cmd string) string {
	t.Helper()
	out, code := sh(t, sb, cmd)
	if code != 0 {
		t.Fatalf("%s in %s: exit %d: %s", cmd, sb.ID, code, out)
	}
	return out
}

// TestVolumeSharedBetweenSandboxes: two sandboxes of a team mount one
// volume; what one writes the other reads once the write returned (a
// fresh read, a file it holds open, a directory listing), and so does
// the content API, both ways.
func TestVolumeSharedBetweenSandboxes(t *testing.T) {
	h, a, vm := volumeHost(t)
	defer a.Close()
	ctx := context.Background()
	if err := vm.CreateVolume(ctx, nodeapi.VolumeSpec{ID: "v1", TeamID: volTeam, SizeMB: 64}); err != nil {
		t.Fatal(err)
	}
	mnt := []nodeapi.VolumeMount{{ID: "v1", Path: "/mnt/data"}}
	sa := volSandbox(t, h, a, "va", mnt...)
	sb := volSandbox(t, h, a, "vb", mnt...)

	// The sandbox's user owns the volume's root and writes there.
	mustSh(t, sa, "echo one > /mnt/data/f; mkdir /mnt/data/d")
	if got := mustSh(t, sb, "cat /mnt/data/f; stat -c %U /mnt/data/f"); got != "one\nuser" {
		t.Fatalf("b reads %q, want a's write by user", got)
	}
	// A file b holds open, re-read after a's overwrite returned.
	mustSh(t, sb, `nohup python3 -c '
import os, time
f = open("/mnt/data/f", "rb")
while True:
    if os.path.exists("/tmp/req"):
        f.seek(0); open("/tmp/ans.tmp", "wb").write(f.read()); os.rename("/tmp/ans.tmp", "/tmp/ans"); os.remove("/tmp/req")
    time.sleep(0.05)
' >/dev/null 2>&1 &`)
	mustSh(t, sa, "echo two > /mnt/data/f")
	mustSh(t, sb, "touch /tmp/req")
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, code := sh(t, sb, "test ! -e /tmp/req && cat /tmp/ans")
		if code == 0 {
			if out != "two" {
				t.Fatalf("b's open file reads %q after a's write, want two", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b's reader never answered")
		}
		time.Sleep(100 * time.Millisecond)
	}
	mustSh(t, sa, "touch /mnt/data/d/x")
	if got := mustSh(t, sb, "ls /mnt/data/d"); got != "x" {
		t.Fatalf("b lists %q, want a's new file", got)
	}
	mustSh(t, sa, "rm -r /mnt/data/d")
	if out, code := sh(t, sb, "ls /mnt/data/d"); code == 0 {
		t.Fatalf("b still lists a's removed directory: %q", out)
	}
	// The content API, both ways.
	if _, err := vm.WriteVolumeFile(ctx, volTeam, "v1", "/api", nodeapi.VolumeFileOptions{}, strings.NewReader("from the api")); err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, sa, "cat /mnt/data/api; echo; stat -c %U /mnt/data/api"); got != "from the api\nuser" {
		t.Fatalf("a reads %q of the content API's write", got)
	}
	mustSh(t, sb, "echo -n from b > /mnt/data/b")
	r, _, err := vm.ReadVolumeFile(ctx, volTeam, "v1", "b")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "from b" {
		t.Fatalf("the content API reads %q of b's write", got)
	}
	// In use: not deleted.
	if err := vm.DeleteVolume(ctx, volTeam, "v1"); !errdefs.IsConflict(err) {
		t.Fatalf("delete of a mounted volume: %v", err)
	}
}

// TestVolumeEscapesFromInside: a sandbox's links and ".." in its volume
// resolve in the sandbox, never on the host; a device it makes there is
// no device; its writes stop at the volume's size with ENOSPC.
func TestVolumeEscapesFromInside(t *testing.T) {
	h, a, vm := volumeHost(t)
	defer a.Close()
	ctx := context.Background()
	if err := vm.CreateVolume(ctx, nodeapi.VolumeSpec{ID: "v1", TeamID: volTeam, SizeMB: 16}); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(h.dir, "host-secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := volSandbox(t, h, a, "ve", nodeapi.VolumeMount{ID: "v1", Path: "/mnt/data"})
	for _, cmd := range []string{
		"ln -s " + secret + " /mnt/data/link; cat /mnt/data/link",
		"ln -s / /mnt/data/root; cat /mnt/data/root" + secret,
		"cat /mnt/data/../../.." + secret,
		"cat /mnt/data/../../../../../../.." + secret,
	} {
		if out, _ := sh(t, s, cmd); strings.Contains(out, "host secret") {
			t.Fatalf("%s read the host's file", cmd)
		}
	}
	if got := mustSh(t, s, "cat /mnt/data/root/etc/hostname"); got != "e2b.local" {
		t.Fatalf("a link to / in the volume resolves to %q, want the sandbox's own /etc/hostname", got)
	}
	// As root inside (sudo): a device node on the volume is no device.
	if out, code := sh(t, s, "sudo mknod /mnt/data/sda b 8 0 && sudo head -c 16 /mnt/data/sda | od -c"); code == 0 && strings.Contains(out, "0000020") {
		t.Fatalf("a block device made on the volume reads the host's disk: %q", out)
	}
	out, code := sh(t, s, "dd if=/dev/zero of=/mnt/data/big bs=1M count=64")
	if code == 0 || !strings.Contains(out, "No space left on device") {
		t.Fatalf("a write past the volume's size: exit %d: %s", code, out)
	}
	if got := mustSh(t, s, "echo still > /home/user/ok; cat /home/user/ok"); got != "still" {
		t.Fatalf("the sandbox's own disk after a full volume: %q", got)
	}
	// Another team's sandbox cannot mount it.
	req := h.createReq("vx" + sandbox.NewID()[:10])
	req.TeamID, req.Volumes = "team-other", []nodeapi.VolumeMount{{ID: "v1", Path: "/mnt/data"}}
	if _, err := a.Create(ctx, req); !errdefs.IsNotFound(err) {
		t.Fatalf("another team's sandbox mounts the volume: %v", err)
	}
	for _, p := range []string{"/proc/x", "/", "/tmp", "/.warren", "relative", "/mnt/../etc"} {
		req := h.createReq("vp" + sandbox.NewID()[:10])
		req.TeamID, req.Volumes = volTeam, []nodeapi.VolumeMount{{ID: "v1", Path: p}}
		if _, err := a.Create(ctx, req); !errdefs.IsInvalid(err) {
			t.Errorf("a volume at %q: %v, want invalid", p, err)
		}
	}
}

// TestVolumeAcrossPauseAndFork: the volume is not in a sandbox's
// snapshot: a resume mounts it again (with what others wrote meanwhile),
// a fork's copies mount it too; a sandbox whose open file on the volume
// was removed while it was paused comes back as a fresh boot of its disk.
func TestVolumeAcrossPauseAndFork(t *testing.T) {
	h, a, vm := volumeHost(t)
	defer a.Close()
	ctx := context.Background()
	if err := vm.CreateVolume(ctx, nodeapi.VolumeSpec{ID: "v1", TeamID: volTeam, SizeMB: 64}); err != nil {
		t.Fatal(err)
	}
	mnt := nodeapi.VolumeMount{ID: "v1", Path: "/mnt/data"}
	sa := volSandbox(t, h, a, "pa", mnt)
	sb := volSandbox(t, h, a, "pb", mnt)
	mustSh(t, sb, "echo before > /mnt/data/f; echo mem > /tmp/mem")
	if _, err := a.Pause(ctx, sb.ID, nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatal(err)
	}
	if err := vm.DeleteVolume(ctx, volTeam, "v1"); !errdefs.IsConflict(err) {
		t.Fatalf("delete of a volume a paused sandbox mounts: %v", err)
	}
	mustSh(t, sa, "echo during > /mnt/data/f")
	rb, err := a.Resume(ctx, sb.ID, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustSh(t, rb, "cat /mnt/data/f /tmp/mem"); got != "during\nmem" {
		t.Fatalf("after resume: %q, want the volume as it is now and the memory as it was", got)
	}

	kid := "pc" + sandbox.NewID()[:10]
	forks, err := a.Fork(ctx, sa.ID, nodeapi.ForkRequest{IDs: []string{kid}, EnvdAccessTokens: []string{"tok-" + kid}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Kill(context.Background(), forks[0].ID, sandbox.KillAdmin) })
	fk := forks[0]
	mustSh(t, fk, "echo from-fork > /mnt/data/g")
	if got := mustSh(t, sa, "cat /mnt/data/g"); got != "from-fork" {
		t.Fatalf("the source reads %q of its copy's write", got)
	}
	if got := vm.Users("v1"); len(got) != 3 {
		t.Fatalf("volume users: %v, want the three sandboxes", got)
	}

	// A file held open across a pause, removed meanwhile.
	mustSh(t, rb, "echo held > /mnt/data/held; echo kept > /home/user/disk; echo mem > /tmp/mem; nohup sh -c 'exec 3</mnt/data/held; sleep 100000' >/dev/null 2>&1 &")
	if _, err := a.Pause(ctx, rb.ID, nodeapi.PauseRequest{Memory: true}); err != nil {
		t.Fatal(err)
	}
	mustSh(t, sa, "rm /mnt/data/held")
	rb, err = a.Resume(ctx, rb.ID, nodeapi.ResumeRequest{})
	if err != nil {
		t.Fatalf("resume after an open file was removed: %v", err)
	}
	if got := mustSh(t, rb, "cat /home/user/disk; cat /tmp/mem 2>/dev/null || echo no-mem; cat /mnt/data/f"); got != "kept\nno-mem\nduring" {
		t.Fatalf("after the fallback resume: %q, want the disk and the volume, not the memory", got)
	}

	for _, s := range []string{sa.ID, rb.ID, fk.ID} {
		if err := a.Kill(ctx, s, sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
	}
	if err := vm.DeleteVolume(ctx, volTeam, "v1"); err != nil {
		t.Fatalf("delete once nothing mounts it: %v", err)
	}
}
