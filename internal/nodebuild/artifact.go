// Package nodebuild carries template builds across the nodes of
// `warren api`: a build requested through the API runs on one node (its
// own build sandboxes and builder), whose status and logs the API copies
// into the shared catalog (Remote); the built root filesystem stays on
// that node as an artifact, a tar recorded with its size and sha256,
// which another node pulls by build ID when it is to start a sandbox of
// the build (Node.Resolve): from a node that holds it, checked against
// the sha256 before use. It speaks the node wire's BuildService (served
// by Node on the node's RPC listener, behind the node's credential and
// pull grants) and ControlPlaneService (served by Remote beside the API,
// behind each node's token), both of api/node/build.proto.
package nodebuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/layer"
)

// ArtifactName is the file, in a build's directory, that holds its root
// filesystem's tar.
const ArtifactName = "rootfs.tar"

// artifactXattr reports whether an artifact carries the extended
// attribute name (layer.PortableXattr).
func artifactXattr(name string) bool { return layer.PortableXattr(name) }

// Digest is an artifact's identity: its sha256 (hex) and size in bytes.
type Digest struct {
	SHA256 string
	Size   int64
}

// writeArtifact writes the tar of the tree at root to path, atomically,
// and returns its digest: layer.WriteTree with the extended attributes
// an artifact carries (artifactXattr). Device nodes, sockets and pipes
// are left out: a sandbox gets its /dev from gVisor, and a node that
// unpacks the tar makes none.
func writeArtifact(ctx context.Context, root, path string) (Digest, error) {
	tmp := path + ".partial"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return Digest{}, err
	}
	defer os.Remove(tmp)
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	if err := layer.WriteTree(ctx, root, cw, artifactXattr); err != nil {
		f.Close()
		return Digest{}, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return Digest{}, err
	}
	if err := f.Close(); err != nil {
		return Digest{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return Digest{}, err
	}
	return Digest{SHA256: hex.EncodeToString(h.Sum(nil)), Size: cw.n}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ErrDigestMismatch is what Receive returns for a stream that is not the
// artifact it claims to be (its class is errdefs.ErrUnavailable: the
// artifact could not be had from that peer).
var ErrDigestMismatch = errors.New("artifact does not match its recorded sha256 and size")

// Receive copies the artifact want from r to path, reading at most
// want.Size bytes and one more to tell a longer stream, and keeps it only
// when its size and sha256 are want's: otherwise nothing is left at path
// and the error wraps ErrDigestMismatch.
func Receive(r io.Reader, want Digest, path string) error {
	if want.Size <= 0 || len(want.SHA256) != sha256.Size*2 {
		return fmt.Errorf("artifact %s: no recorded digest: %w", filepath.Base(filepath.Dir(path)), errdefs.ErrUnavailable)
	}
	tmp := path + ".receiving"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, want.Size+1))
	if err != nil {
		f.Close()
		return fmt.Errorf("receive artifact: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != want.Size || got != want.SHA256 {
		return fmt.Errorf("received %d bytes (sha256 %s), want %d (sha256 %s): %w: %w", n, got, want.Size, want.SHA256, ErrDigestMismatch, errdefs.ErrUnavailable)
	}
	return os.Rename(tmp, path)
}

// unpack unpacks the tar at path into dir, atomically (a sibling first,
// renamed into place when complete), making no device nodes, taking
// ".wh." names as files (an artifact is a whole tree, not a layer) and
// refusing an extended attribute an artifact does not carry.
func unpack(ctx context.Context, path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tmp := dir + ".unpacking"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := layer.Unpack(ctx, f, tmp, layer.Options{Tree: true, Xattr: artifactXattr}); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("unpack artifact: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return nil
}
