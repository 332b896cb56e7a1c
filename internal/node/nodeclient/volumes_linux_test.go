package nodeclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/mountinfo"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
	"github.com/warren-sandbox/warren/internal/node/volumes"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// cutReader gives n bytes, then fails.
type cutReader struct{ n int }

func (c *cutReader) Read(b []byte) (int, error) {
	if c.n <= 0 {
		return 0, errors.New("client went away")
	}
	k := min(len(b), c.n)
	c.n -= k
	return k, nil
}

// TestVolumesOverRPC: the volume calls cross the node RPC with their
// classes and messages, files stream both ways in chunks, and a cut
// upload leaves the file as it was.
func TestVolumesOverRPC(t *testing.T) {
	testenv.NeedRoot(t, "volumes mount ext4 images over loop devices")
	root := filepath.Join(t.TempDir(), "volumes")
	t.Cleanup(func() {
		mps, _ := mountinfo.Under(root, true)
		for _, mp := range mps {
			_ = rootfs.UnmountPath(mp)
		}
	})
	vm, err := volumes.New(context.Background(), volumes.Config{Root: root, MinFreeDiskMB: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	r := newRig(t, fake.Config{}, "tok", func(_ *node.Agent, o *noderpc.Options) { o.Volumes = vm })
	c, ctx := r.client, context.Background()
	const team = "team-a"
	if err := c.CreateVolume(ctx, nodeapi.VolumeSpec{ID: "v1", TeamID: team, SizeMB: 16}); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateVolume(ctx, nodeapi.VolumeSpec{ID: "v1", TeamID: team, SizeMB: 16}); !errdefs.IsAlreadyExists(err) {
		t.Fatalf("second create: %v", err)
	}
	// Several chunks each way.
	data := bytes.Repeat([]byte("0123456789abcdef"), 3*noderpc.VolumeChunkSize/16+5)
	mode := uint32(0o640)
	e, err := c.WriteVolumeFile(ctx, team, "v1", "/dir/../f", nodeapi.VolumeFileOptions{Mode: &mode}, bytes.NewReader(data))
	if err != nil || e.Path != "/f" || e.Size != int64(len(data)) || e.Mode != 0o640 || e.UID != volumes.DefaultOwner {
		t.Fatalf("write: %+v, %v", e, err)
	}
	rc, e, err := c.ReadVolumeFile(ctx, team, "v1", "f")
	if err != nil || e.Size != int64(len(data)) {
		t.Fatalf("read: %+v, %v", e, err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(data))
	}
	if _, err := c.WriteVolumeFile(ctx, team, "v1", "f", nodeapi.VolumeFileOptions{Force: true}, &cutReader{n: 2 * noderpc.VolumeChunkSize}); err == nil {
		t.Fatal("a cut upload succeeded")
	}
	if e, err := c.StatVolumePath(ctx, team, "v1", "f"); err != nil || e.Size != int64(len(data)) {
		t.Fatalf("after a cut upload: %+v, %v", e, err)
	}
	if _, err := c.WriteVolumeFile(ctx, team, "v1", "f", nodeapi.VolumeFileOptions{}, strings.NewReader("x")); !errdefs.IsAlreadyExists(err) ||
		!strings.Contains(errhttp.Message(err), "write with force") {
		t.Fatalf("write over a file without force: %v (%q)", err, errhttp.Message(err))
	}
	big := bytes.Repeat([]byte("x"), 64<<20)
	if _, err := c.WriteVolumeFile(ctx, team, "v1", "big", nodeapi.VolumeFileOptions{}, bytes.NewReader(big)); !errdefs.IsExhausted(err) || errhttp.Message(err) != "the volume is full" {
		t.Fatalf("a write past the size: %v (%q)", err, errhttp.Message(err))
	}
	if _, err := c.MakeVolumeDir(ctx, team, "v1", "a/b", nodeapi.VolumeFileOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	uid := uint32(0)
	if e, err := c.SetVolumeMetadata(ctx, team, "v1", "a", nodeapi.VolumeMetadata{UID: &uid}); err != nil || e.UID != 0 || e.GID != volumes.DefaultOwner {
		t.Fatalf("set metadata: %+v, %v", e, err)
	}
	es, err := c.ListVolumeDir(ctx, team, "v1", "/", 2)
	if err != nil || len(es) != 3 {
		t.Fatalf("list: %+v, %v", es, err)
	}
	if err := c.RemoveVolumePath(ctx, team, "v1", "a"); err != nil {
		t.Fatal(err)
	}
	_, err = c.StatVolumePath(ctx, team, "v1", "a")
	if !errdefs.IsNotFound(err) || errhttp.Message(err) != `path "/a" not found` {
		t.Fatalf("stat of a removed path: %v (%q)", err, errhttp.Message(err))
	}
	// Another team: nothing.
	if _, _, err := c.ReadVolumeFile(ctx, "team-b", "v1", "f"); !errdefs.IsNotFound(err) {
		t.Fatalf("read by another team: %v", err)
	}
	if err := c.DeleteVolume(ctx, "team-b", "v1"); !errdefs.IsNotFound(err) {
		t.Fatalf("delete by another team: %v", err)
	}
	if err := c.DeleteVolume(ctx, team, "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatVolumePath(ctx, team, "v1", "/"); !errdefs.IsNotFound(err) {
		t.Fatalf("stat of a deleted volume: %v", err)
	}
}

func TestVolumesUnsupportedOverRPC(t *testing.T) {
	r := newRig(t, fake.Config{}, "")
	if err := r.client.CreateVolume(context.Background(), nodeapi.VolumeSpec{ID: "v1", TeamID: "t", SizeMB: 1}); !errdefs.IsUnsupported(err) {
		t.Fatalf("volumes on a node without: %v", err)
	}
	if _, _, err := r.client.ReadVolumeFile(context.Background(), "t", "v1", "f"); !errdefs.IsUnsupported(err) {
		t.Fatalf("read on a node without: %v", err)
	}
}
