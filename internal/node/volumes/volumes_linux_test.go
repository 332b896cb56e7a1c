package volumes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/mountinfo"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/testenv"
)

const team = "team-a"

// newManager opens a Manager on a new root; whatever it mounted is
// unmounted when the test ends, even after a failure.
func newManager(t *testing.T) (*Manager, string) {
	t.Helper()
	testenv.NeedRoot(t, "volumes mount ext4 images over loop devices")
	root := filepath.Join(t.TempDir(), "volumes")
	t.Cleanup(func() { unmountAll(t, root) }) // after the Manager's Close
	m := openManager(t, root)
	return m, root
}

func openManager(t *testing.T, root string) *Manager {
	t.Helper()
	m, err := New(context.Background(), Config{Root: root, Logger: testenv.Logger(t), MinFreeDiskMB: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func unmountAll(t *testing.T, root string) {
	mps, err := mountinfo.Under(root, true)
	if err != nil {
		t.Errorf("mounts under %s: %v", root, err)
	}
	for _, mp := range mps {
		if err := rootfs.UnmountPath(mp); err != nil {
			t.Errorf("unmount %s: %v", mp, err)
		}
	}
	for _, mp := range mps {
		img := filepath.Join(filepath.Dir(mp), imageFile)
		if err := rootfs.WaitDetached(context.Background(), img, 10*time.Second); err != nil {
			t.Errorf("detach %s: %v", img, err)
		}
	}
}

func newVolume(t *testing.T, m *Manager, id string, mb int64) string {
	t.Helper()
	if err := m.CreateVolume(context.Background(), nodeapi.VolumeSpec{ID: id, TeamID: team, SizeMB: mb}); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(m.cfg.Root, volPrefix+id, fsDir, dataDir)
}

func write(t *testing.T, m *Manager, p, content string, force bool) (*nodeapi.VolumeEntry, error) {
	t.Helper()
	return m.WriteVolumeFile(context.Background(), team, "v1", p, nodeapi.VolumeFileOptions{Force: force}, strings.NewReader(content))
}

func read(t *testing.T, m *Manager, p string) (string, error) {
	t.Helper()
	r, _, err := m.ReadVolumeFile(context.Background(), team, "v1", p)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

// TestContentStaysInTheVolume is the attack: what a sandbox can put in a
// volume (links out of it, "..", a FIFO, a device node) must not take
// the content API, which runs as root on the host, out of the volume.
func TestContentStaysInTheVolume(t *testing.T) {
	m, _ := newManager(t)
	data := newVolume(t, m, "v1", 16)
	hostDir := t.TempDir() // stands for the host's files
	secret := filepath.Join(hostDir, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What a tenant's sandbox may write into its volume.
	for name, target := range map[string]string{
		"abs":    hostDir,
		"rel":    "../../../../../../../../" + strings.TrimPrefix(hostDir, "/"),
		"up":     "..",
		"file":   secret,
		"loop1":  "loop2",
		"loop2":  "loop1",
		"inside": "/sub",
	} {
		if err := os.Symlink(target, filepath.Join(data, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(data, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "sub", "secret"), []byte("the volume's own"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(data, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	// /dev/null's numbers; any device is refused on a nodev mount.
	if err := unix.Mknod(filepath.Join(data, "dev"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{"abs/secret", "rel/secret", "up/up/" + strings.TrimPrefix(secret, "/"), "file",
		"../../../../" + strings.TrimPrefix(secret, "/"), "/" + secret, "sub/../../../" + strings.TrimPrefix(secret, "/")} {
		got, err := read(t, m, p)
		if strings.Contains(got, "host secret") {
			t.Fatalf("read %q gave the host's file", p)
		}
		if !errdefs.IsNotFound(err) {
			t.Errorf("read %q: %v, want not found", p, err)
		}
	}
	// Links resolve as if the volume were "/".
	if got, err := read(t, m, "inside/secret"); err != nil || got != "the volume's own" {
		t.Errorf("read through a link inside the volume: %q, %v", got, err)
	}
	if _, err := read(t, m, "loop1"); !errdefs.IsInvalid(err) {
		t.Errorf("read of a link loop: %v, want invalid", err)
	}
	done := make(chan error, 1)
	go func() { _, err := read(t, m, "fifo"); done <- err }()
	select {
	case err := <-done:
		if !errdefs.IsInvalid(err) {
			t.Errorf("read of a FIFO: %v, want invalid", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read of a FIFO blocks")
	}
	// The host mount is nodev: the device is not even opened.
	if got, err := read(t, m, "dev"); !errors.Is(err, errdefs.ErrForbidden) {
		t.Errorf("read of a device node: %q, %v, want forbidden", got, err)
	}

	// Writes, directories, metadata and removals through the links stay
	// inside as well.
	if _, err := write(t, m, "abs/planted", "x", true); !errdefs.IsNotFound(err) {
		t.Errorf("write through a link out: %v, want not found", err)
	}
	if _, err := m.MakeVolumeDir(context.Background(), team, "v1", "abs/made", nodeapi.VolumeFileOptions{Force: true}); !errdefs.IsNotFound(err) {
		t.Fatalf("make dir through a link to a directory the volume lacks: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(data, strings.TrimPrefix(hostDir, "/")), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := m.MakeVolumeDir(context.Background(), team, "v1", "abs/made/deeper", nodeapi.VolumeFileOptions{Force: true}); err != nil {
		t.Fatalf("make dir through a link: %v", err)
	}
	if _, err := write(t, m, "rel/planted", "x", false); err != nil {
		t.Fatalf("write through a relative link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "planted")); err == nil {
		t.Fatal("a write through a link planted a file on the host")
	}
	if _, err := os.Stat(filepath.Join(data, strings.TrimPrefix(hostDir, "/"), "made", "deeper")); err != nil {
		t.Errorf("make dir through a link did not land in the volume: %v", err)
	}
	if _, err := write(t, m, "file", "replaced", true); err != nil {
		t.Fatalf("write over a link: %v", err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "host secret" {
		t.Fatalf("write over a link changed the host's file: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(data, "file")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("write over a link: the link is not replaced by a file: %v, %v", fi, err)
	}
	mode := uint32(0o777)
	if err := os.Symlink(secret, filepath.Join(data, "file2")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetVolumeMetadata(context.Background(), team, "v1", "file2", nodeapi.VolumeMetadata{Mode: &mode}); !errdefs.IsNotFound(err) {
		t.Errorf("chmod through a link out: %v, want not found", err)
	}
	if fi, _ := os.Stat(secret); fi.Mode().Perm() != 0o600 {
		t.Fatalf("chmod through a link changed the host's file: %v", fi.Mode())
	}
	if err := m.RemoveVolumePath(context.Background(), team, "v1", "abs"); err != nil {
		t.Fatalf("remove a link: %v", err)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("removing a link removed its target: %v", err)
	}
	for _, p := range []string{"/", "..", "../..", "."} {
		if err := m.RemoveVolumePath(context.Background(), team, "v1", p); !errdefs.IsInvalid(err) {
			t.Errorf("remove %q: %v, want invalid (the volume's root)", p, err)
		}
	}
	if _, err := m.ListVolumeDir(context.Background(), team, "v1", "/", MaxListDepth); err != nil {
		t.Errorf("deep list with link loops: %v", err)
	}
	// Another team's calls find no volume.
	if _, err := m.StatVolumePath(context.Background(), "team-b", "v1", "/"); !errdefs.IsNotFound(err) {
		t.Errorf("stat by another team: %v", err)
	}
	if _, err := m.WriteVolumeFile(context.Background(), "team-b", "v1", "x", nodeapi.VolumeFileOptions{}, strings.NewReader("x")); !errdefs.IsNotFound(err) {
		t.Errorf("write by another team: %v", err)
	}
	if err := m.DeleteVolume(context.Background(), "team-b", "v1"); !errdefs.IsNotFound(err) {
		t.Errorf("delete by another team: %v", err)
	}
}

// failingReader fails after n bytes, as a client cut off mid-upload.
type failingReader struct{ n int }

func (f *failingReader) Read(b []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("client went away")
	}
	k := min(len(b), f.n)
	for i := range b[:k] {
		b[i] = 'n'
	}
	f.n -= k
	return k, nil
}

func TestWriteIsWholeOrNothing(t *testing.T) {
	m, _ := newManager(t)
	data := newVolume(t, m, "v1", 16)
	e, err := write(t, m, "f", "old", false)
	if err != nil || e.Size != 3 || e.Type != nodeapi.VolumeFile || e.Path != "/f" || e.Name != "f" {
		t.Fatalf("write: %+v, %v", e, err)
	}
	if _, err := write(t, m, "f", "new", false); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("write over a file without force: %v", err)
	}
	if _, err := m.WriteVolumeFile(context.Background(), team, "v1", "f", nodeapi.VolumeFileOptions{Force: true}, &failingReader{n: 1 << 20}); err == nil {
		t.Fatal("a cut upload succeeded")
	}
	if got, _ := read(t, m, "f"); got != "old" {
		t.Fatalf("after a cut upload the file reads %q", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(filepath.Dir(data), stagingDir)); len(ents) != 0 {
		t.Fatalf("a cut upload left %v in staging", ents)
	}
	if _, err := write(t, m, "f", "new", true); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, m, "f"); got != "new" {
		t.Fatalf("after a forced write the file reads %q", got)
	}
	if _, err := write(t, m, "missing/f", "x", true); !errdefs.IsNotFound(err) {
		t.Fatalf("write into a missing directory: %v", err)
	}
	// Ownership: the parent's owner unless given, and the modes asked.
	fi, _ := os.Stat(filepath.Join(data, "f"))
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != DefaultOwner || st.Gid != DefaultOwner || fi.Mode().Perm() != 0o644 {
		t.Fatalf("a new file is %d:%d %v, want the root's owner and 0644", st.Uid, st.Gid, fi.Mode())
	}
	uid, gid, mode := uint32(0), uint32(5), uint32(0o600)
	e, err = m.MakeVolumeDir(context.Background(), team, "v1", "a/b/c", nodeapi.VolumeFileOptions{Force: true, UID: &uid, GID: &gid, Mode: &mode})
	if err != nil || e.Type != nodeapi.VolumeDirectory || e.UID != 0 || e.GID != 5 || e.Mode != 0o600 {
		t.Fatalf("make dir with owner and mode: %+v, %v", e, err)
	}
	if _, err := m.MakeVolumeDir(context.Background(), team, "v1", "a/b/c", nodeapi.VolumeFileOptions{}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("make an existing dir: %v", err)
	}
	if _, err := m.MakeVolumeDir(context.Background(), team, "v1", "x/y", nodeapi.VolumeFileOptions{}); !errdefs.IsNotFound(err) {
		t.Fatalf("make a dir in a missing one: %v", err)
	}
	ents, err := m.ListVolumeDir(context.Background(), team, "v1", "/", 3)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range ents {
		paths = append(paths, e.Path)
	}
	if strings.Join(paths, " ") != "/f /a /a/b /a/b/c" && strings.Join(paths, " ") != "/a /a/b /a/b/c /f" {
		t.Fatalf("list: %v", paths)
	}
	if err := m.RemoveVolumePath(context.Background(), team, "v1", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.StatVolumePath(context.Background(), team, "v1", "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("stat after remove: %v", err)
	}
	if err := m.RemoveVolumePath(context.Background(), team, "v1", "a"); !errdefs.IsNotFound(err) {
		t.Fatalf("remove of a missing path: %v", err)
	}
}

func TestVolumeSizeIsBounded(t *testing.T) {
	m, _ := newManager(t)
	newVolume(t, m, "v1", 8)
	if _, err := write(t, m, "keep", "kept", false); err != nil {
		t.Fatal(err)
	}
	// An image holds at least its size (more for a small one: ext4's own
	// blocks are sized for it).
	big := bytes.Repeat([]byte("x"), 64<<20)
	_, err := m.WriteVolumeFile(context.Background(), team, "v1", "big", nodeapi.VolumeFileOptions{}, bytes.NewReader(big))
	if !errdefs.IsExhausted(err) || errhttp.Message(err) != "the volume is full" {
		t.Fatalf("a write past the size: %v", err)
	}
	if _, err := m.StatVolumePath(context.Background(), team, "v1", "big"); !errdefs.IsNotFound(err) {
		t.Fatalf("a write that did not fit left a file: %v", err)
	}
	if _, err := m.WriteVolumeFile(context.Background(), team, "v1", "fits", nodeapi.VolumeFileOptions{}, bytes.NewReader(big[:4<<20])); err != nil {
		t.Fatalf("a write that fits, after a full one: %v", err)
	}
	if got, _ := read(t, m, "keep"); got != "kept" {
		t.Fatalf("the volume lost a file: %q", got)
	}
}

func TestVolumesSurviveARestart(t *testing.T) {
	m, root := newManager(t)
	newVolume(t, m, "v1", 8)
	if _, err := write(t, m, "f", "before", false); err != nil {
		t.Fatal(err)
	}
	m.Close()
	// What a crash leaves: a create and a delete cut short, an upload in
	// staging; and a reboot: nothing mounted.
	for _, d := range []string{newPrefix + "v2", delPrefix + "v3"} {
		if err := os.MkdirAll(filepath.Join(root, d, fsDir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, volPrefix+"v1", fsDir, stagingDir, "w-cut"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	unmountAll(t, root)
	m2 := openManager(t, root)
	if got, _ := read(t, m2, "f"); got != "before" {
		t.Fatalf("after a restart the file reads %q", got)
	}
	for _, d := range []string{newPrefix + "v2", delPrefix + "v3", filepath.Join(volPrefix+"v1", fsDir, stagingDir, "w-cut")} {
		if _, err := os.Lstat(filepath.Join(root, d)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was left after the restart: %v", d, err)
		}
	}
	if ids := m2.IDs(); len(ids) != 1 || ids[0] != "v1" {
		t.Fatalf("volumes after the restart: %v", ids)
	}
	// A second Manager over mounted volumes (the node restarted, the
	// machine did not) takes them as they are.
	m2.Close()
	m3 := openManager(t, root)
	if got, _ := read(t, m3, "f"); got != "before" {
		t.Fatalf("after a second restart the file reads %q", got)
	}
}

func TestVolumeInUseIsNotDeleted(t *testing.T) {
	m, root := newManager(t)
	newVolume(t, m, "v1", 8)
	ctx := context.Background()
	if _, err := m.Acquire("sbx1", "team-b", []nodeapi.VolumeMount{{ID: "v1", Path: "/mnt"}}); !errdefs.IsNotFound(err) {
		t.Fatalf("another team's sandbox mounts the volume: %v", err)
	}
	mounts, err := m.Acquire("sbx1", team, []nodeapi.VolumeMount{{ID: "v1", Path: "/mnt/data"}})
	if err != nil || len(mounts) != 1 || mounts[0].Destination != "/mnt/data" || mounts[0].Source != filepath.Join(root, "vol-v1", "fs", "data") {
		t.Fatalf("acquire: %+v, %v", mounts, err)
	}
	if err := m.DeleteVolume(ctx, team, "v1"); !errdefs.IsConflict(err) {
		t.Fatalf("delete while mounted: %v", err)
	}
	m.Release("sbx1")
	r, _, err := func() (io.ReadCloser, *nodeapi.VolumeEntry, error) {
		if _, err := write(t, m, "f", "x", false); err != nil {
			return nil, nil, err
		}
		return m.ReadVolumeFile(ctx, team, "v1", "f")
	}()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteVolume(ctx, team, "v1"); !errdefs.IsConflict(err) {
		t.Fatalf("delete while a read is open: %v", err)
	}
	r.Close()
	if err := m.DeleteVolume(ctx, team, "v1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "vol-v1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted volume's directory is left: %v", err)
	}
	if _, err := m.Acquire("sbx2", team, []nodeapi.VolumeMount{{ID: "v1", Path: "/mnt"}}); !errdefs.IsNotFound(err) {
		t.Fatalf("a deleted volume is mounted: %v", err)
	}
	if err := m.CreateVolume(ctx, nodeapi.VolumeSpec{ID: "v1", TeamID: team, SizeMB: 8}); err != nil {
		t.Fatalf("a volume of a deleted one's ID: %v", err)
	}
	if err := m.CreateVolume(ctx, nodeapi.VolumeSpec{ID: "v1", TeamID: team, SizeMB: 8}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("a second create of one ID: %v", err)
	}
	if err := m.CreateVolume(ctx, nodeapi.VolumeSpec{ID: "../x", TeamID: team, SizeMB: 8}); !errdefs.IsInvalid(err) {
		t.Fatalf("a volume ID that is a path: %v", err)
	}
}

func TestNoRoomForAVolume(t *testing.T) {
	testenv.NeedRoot(t, "volumes mount ext4 images over loop devices")
	root := filepath.Join(t.TempDir(), "volumes")
	m, err := New(context.Background(), Config{Root: root, FreeDisk: func(string) (uint64, error) { return 100 << 20, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	err = m.CreateVolume(context.Background(), nodeapi.VolumeSpec{ID: "v1", TeamID: team, SizeMB: 64})
	if !errdefs.IsExhausted(err) || errhttp.Message(err) != "the node has no room for a volume of 64 MiB" {
		t.Fatalf("a volume the disk has no room for: %v (%q)", err, errhttp.Message(err))
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Fatalf("a refused create left %v", ents)
	}
}
