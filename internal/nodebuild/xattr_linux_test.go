package nodebuild_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodebuild"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// capNetRaw is security.capability's value for cap_net_raw+ep (struct
// vfs_cap_data, revision 2), what setcap writes on ping.
func capNetRaw() string {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000000|0x1) // VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE
	binary.LittleEndian.PutUint32(b[4:], 1<<unix.CAP_NET_RAW)
	return string(b)
}

// aclDefault is a default POSIX ACL (user::rwx group::r-x other::r-x).
func aclDefault() string {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range [][2]uint16{{0x01, 7}, {0x04, 5}, {0x20, 5}} {
		b = binary.LittleEndian.AppendUint16(b, e[0])
		b = binary.LittleEndian.AppendUint16(b, e[1])
		b = binary.LittleEndian.AppendUint32(b, 0xffffffff)
	}
	return string(b)
}

func getxattr(t *testing.T, p, name string) (string, bool) {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Lgetxattr(p, name, buf)
	if err == unix.ENODATA {
		return "", false
	}
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", p, name, err)
	}
	return string(buf[:n]), true
}

func setxattr(t *testing.T, p, name, v string) {
	t.Helper()
	if err := unix.Lsetxattr(p, name, []byte(v), 0); err != nil {
		t.Fatalf("setxattr %s %s: %v", p, name, err)
	}
}

// TestPullKeepsExtendedAttributes: a build's file capabilities, ACLs and
// user attributes (envd's file metadata) reach the node that pulls it;
// what only the builder's host meant (its SELinux label, IMA signature,
// overlayfs' own attributes) does not travel; a file named like an OCI
// whiteout is a file.
func TestPullKeepsExtendedAttributes(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "security.* and trusted.* attributes")
	holder := newPeer(t, nil)
	holder.holdBuild(t)
	rootfs := filepath.Join(holder.local.Catalog.BuildDir(build.ID), "rootfs")
	kept := map[string][2]string{ // path: name, value
		"hi":      {"security.capability", capNetRaw()},
		"etc/big": {"user.e2b.owner", "alice"},
		"etc":     {"system.posix_acl_default", aclDefault()},
	}
	for p, x := range kept {
		setxattr(t, filepath.Join(rootfs, p), x[0], x[1])
	}
	dropped := map[string]string{
		"security.selinux":       "system_u:object_r:bin_t:s0",
		"security.ima":           "\x03\x02\x04",
		"trusted.overlay.opaque": "y",
		"user.overlay.opaque":    "y",
	}
	for name, v := range dropped {
		setxattr(t, filepath.Join(rootfs, "etc"), name, v)
	}
	must(t, os.WriteFile(filepath.Join(rootfs, ".wh.hi"), []byte("a file\n"), 0o644))

	puller := newPeer(t, sourceFrom(t, holder, holder.srv.URL))
	got, err := puller.node.Resolve(context.Background(), "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID})
	if err != nil {
		t.Fatal(err)
	}
	for p, x := range kept {
		if v, ok := getxattr(t, filepath.Join(got.RootFS, p), x[0]); !ok || v != x[1] {
			t.Errorf("/%s: %s = %q (%v), want %q", p, x[0], v, ok, x[1])
		}
	}
	if v, ok := getxattr(t, filepath.Join(got.RootFS, "etc", "hi-hard"), "security.capability"); !ok || v != capNetRaw() {
		t.Errorf("/etc/hi-hard (a hard link of /hi) lost the capability: %q", v)
	}
	for name := range dropped {
		if v, ok := getxattr(t, filepath.Join(got.RootFS, "etc"), name); ok {
			t.Errorf("/etc: %s = %q travelled", name, v)
		}
	}
	if b, err := os.ReadFile(filepath.Join(got.RootFS, ".wh.hi")); err != nil || string(b) != "a file\n" {
		t.Errorf("/.wh.hi = %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(got.RootFS, "hi")); err != nil || string(b) != "hi\n" {
		t.Errorf("/hi = %q, %v (a whiteout-like name removed it)", b, err)
	}
}

// forged is a tar of a directory etc and a file etc/x, the one carrying
// the extended attribute name.
func forged(t *testing.T, onDir bool, name string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	rec := map[string]string{"SCHILY.xattr." + name: "y"}
	dir := &tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}
	file := &tar.Header{Name: "etc/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2, Format: tar.FormatPAX}
	if onDir {
		dir.PAXRecords = rec
	} else {
		file.PAXRecords = rec
	}
	must(t, tw.WriteHeader(dir))
	must(t, tw.WriteHeader(file))
	_, err := tw.Write([]byte("x\n"))
	must(t, err)
	must(t, tw.Close())
	return buf.Bytes()
}

// TestPullRefusesForeignXattrs: an artifact whose recorded digest is its
// own (a build or holder that forged it) but that carries an extended
// attribute no artifact carries (overlayfs' whiteouts and opaque
// directories, which on a lower layer of a build FROM the template would
// hide the layers below; a host's SELinux label or IMA signature;
// trusted.*) is refused: the create is unavailable on this node, nothing
// of it is left, and the build is not recorded.
func TestPullRefusesForeignXattrs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		onDir bool
	}{
		{"trusted.overlay.opaque", true},
		{"trusted.overlay.whiteout", false},
		{"user.overlay.opaque", true},
		{"user.overlay.redirect", true},
		{"security.selinux", false},
		{"security.ima", false},
		{"trusted.warren", false},
		{"system.nfs4_acl", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			art := forged(t, c.onDir, c.name)
			sum := sha256.Sum256(art)
			holder := servesBytes(t, art)
			b := build
			b.RootFSSHA256, b.RootFSSize = hex.EncodeToString(sum[:]), int64(len(art))
			puller := newPeer(t, func(context.Context, string) (*nodepb.BuildSource, error) {
				src := nodebuild.SourceOf(&tmpl, &b, grantTo(holder.URL, b.ID))
				src.Current = true
				return src, nil
			})
			_, err := puller.node.Resolve(context.Background(), "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID})
			if !errdefs.IsUnavailable(err) || errdefs.IsInvalid(err) || !strings.Contains(err.Error(), c.name) {
				t.Fatalf("Resolve of an artifact with %s: err = %v, want unavailable naming it", c.name, err)
			}
			if left, _ := os.ReadDir(puller.local.Catalog.BuildDir(build.ID)); len(left) != 0 {
				t.Fatalf("a refused artifact left %v", left)
			}
			if _, err := puller.local.Catalog.Build(context.Background(), build.ID); !errdefs.IsNotFound(err) {
				t.Fatalf("a refused artifact recorded the build: %v", err)
			}
		})
	}
	// The same tar with an attribute an artifact carries is taken.
	art := forged(t, false, "user.e2b.owner")
	sum := sha256.Sum256(art)
	holder := servesBytes(t, art)
	b := build
	b.RootFSSHA256, b.RootFSSize = hex.EncodeToString(sum[:]), int64(len(art))
	puller := newPeer(t, func(context.Context, string) (*nodepb.BuildSource, error) {
		src := nodebuild.SourceOf(&tmpl, &b, grantTo(holder.URL, b.ID))
		src.Current = true
		return src, nil
	})
	got, err := puller.node.Resolve(context.Background(), "team-a", nodeapi.Template{ID: tmpl.ID, BuildID: build.ID})
	if err != nil {
		t.Fatalf("Resolve of an artifact with user.e2b.owner: %v", err)
	}
	if v, ok := getxattr(t, filepath.Join(got.RootFS, "etc", "x"), "user.e2b.owner"); !ok || v != "y" {
		t.Fatalf("/etc/x user.e2b.owner = %q, %v", v, ok)
	}
}
