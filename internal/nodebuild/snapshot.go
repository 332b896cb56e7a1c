package nodebuild

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/api/node/nodepbconnect"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/templates"
)

// A build's snapshot on ready travels as its second artifact: a tar of
// the snapshot directory's regular files (the runtime's memory image,
// nodeapi.SnapshotMetaFile, nodeapi.SnapshotLayerTar), recorded with its
// size and sha256 and the host it was taken with (Build.SnapshotSHA256,
// SnapshotSize, SnapshotHost). A node that pulls the build restores it
// only when that host is one it matches; otherwise, or when anything of
// the artifact is not as recorded, its sandboxes start cold.

// SnapshotArtifactName is the file, in a build's directory, that holds
// its snapshot on ready's artifact.
const SnapshotArtifactName = "snapshot.tar"

// snapshotDirName is a pulled snapshot's directory in the build's (where
// the template collector frees it with its saved layer).
const snapshotDirName = "snapshot"

// Bounds of a snapshot artifact's tar.
const (
	maxSnapshotFiles      = 64
	maxSnapshotLayerItems = 1 << 20
)

// Snapshots is what the node agent does for a snapshot on ready to
// travel (node.Agent): describe this node for a template's snapshot, and
// make a received one restorable here.
type Snapshots interface {
	SnapshotHost(t nodeapi.Template) (nodeapi.SnapshotHost, error)
	ImportSnapshot(ctx context.Context, t nodeapi.Template, dir string) error
}

func (n *Node) snapshotArtifactPath(buildID string) string {
	return filepath.Join(n.cfg.Catalog.BuildDir(buildID), SnapshotArtifactName)
}

// snapshotMeta is the part of a snapshot's description the artifact's
// handling reads.
type snapshotMeta struct {
	Host *nodeapi.SnapshotHost `json:"host"`
}

func readSnapshotHost(dir string) (*nodeapi.SnapshotHost, error) {
	b, err := os.ReadFile(filepath.Join(dir, nodeapi.SnapshotMetaFile))
	if err != nil {
		return nil, err
	}
	var m snapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", nodeapi.SnapshotMetaFile, errdefs.ErrInvalid, err)
	}
	return m.Host, nil
}

// exportSnapshot writes the artifact of build b's snapshot on ready, when
// it has one that can travel, and records its digest and host.
func (n *Node) exportSnapshot(ctx context.Context, b *templates.Build) error {
	if b.SnapshotDir == "" {
		return nil
	}
	host, err := readSnapshotHost(b.SnapshotDir)
	if err == nil && host == nil {
		err = errors.New("taken for this node alone")
	}
	if err == nil {
		_, err = os.Stat(filepath.Join(b.SnapshotDir, nodeapi.SnapshotLayerTar))
	}
	if err != nil {
		n.log.Info("a build's snapshot on ready stays on this node", "build_id", b.ID, "error", err)
		n.mu.Lock()
		n.localSnaps[b.ID] = true
		n.mu.Unlock()
		return nil
	}
	tmp := n.snapshotArtifactPath(b.ID) + ".partial"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	d, err := writeSnapshotTar(ctx, b.SnapshotDir, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("build %q snapshot artifact: %w", b.ID, err)
	}
	if err := os.Rename(tmp, n.snapshotArtifactPath(b.ID)); err != nil {
		return err
	}
	_, err = n.cfg.Catalog.Store().UpdateBuild(ctx, b.ID, func(x *templates.Build) error {
		x.SnapshotSHA256, x.SnapshotSize, x.SnapshotHost = d.SHA256, d.Size, host
		return nil
	})
	n.log.Info("build snapshot artifact written", "build_id", b.ID, "size", d.Size, "sha256", d.SHA256)
	return err
}

// writeSnapshotTar writes the regular files of dir (no subdirectories)
// as a tar to f, synced, and returns its digest.
func writeSnapshotTar(ctx context.Context, dir string, f *os.File) (Digest, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Digest{}, err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(cw)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return Digest{}, err
		}
		if !e.Type().IsRegular() {
			continue
		}
		if err := addFile(tw, filepath.Join(dir, e.Name()), e.Name()); err != nil {
			return Digest{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Digest{}, err
	}
	if err := f.Sync(); err != nil {
		return Digest{}, err
	}
	return Digest{SHA256: hex.EncodeToString(h.Sum(nil)), Size: cw.n}, nil
}

func addFile(tw *tar.Writer, p, name string) error {
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: fi.Size(), Mode: 0o600, ModTime: fi.ModTime(), Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// pullSnapshot gets the snapshot on ready of build b (just pulled, its
// template t as this node resolves it) from one of holders and makes it
// restorable here; it returns the snapshot's directory, or why the
// build's sandboxes start cold here.
func (n *Node) pullSnapshot(ctx context.Context, t nodeapi.Template, b *templates.Build, holders []*nodepb.BuildHolder) (string, error) {
	if err := n.restorable(t, b); err != nil {
		return "", err
	}
	want := Digest{SHA256: b.SnapshotSHA256, Size: b.SnapshotSize}
	art := n.snapshotArtifactPath(b.ID)
	var errs []error
	for _, h := range holders {
		err := n.fetchPath(ctx, h, b.ID, nodepb.ArtifactKind_ARTIFACT_KIND_SNAPSHOT, want, art)
		if err == nil {
			errs = nil
			break
		}
		errs = append(errs, fmt.Errorf("from %s: %w", h.GetAddress(), err))
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	dir := filepath.Join(n.cfg.Catalog.BuildDir(b.ID), snapshotDirName)
	staging := dir + ".importing"
	if err := n.stageSnapshot(ctx, art, staging, *b.SnapshotHost); err != nil {
		os.RemoveAll(staging)
		os.Remove(art)
		return "", err
	}
	if err := n.cfg.Snapshots.ImportSnapshot(ctx, t, staging); err != nil {
		os.RemoveAll(staging)
		os.Remove(art)
		return "", err
	}
	// What the saved layer holds now (the artifact keeps it for others).
	os.Remove(filepath.Join(staging, nodeapi.SnapshotLayerTar))
	if err := os.Rename(staging, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// restorable tells whether this node can restore the snapshot build b
// (of template t as it resolves here; only its resources matter)
// recorded: one that travels, taken on a host this node matches.
func (n *Node) restorable(t nodeapi.Template, b *templates.Build) error {
	if b.SnapshotSHA256 == "" || b.SnapshotHost == nil {
		return fmt.Errorf("its builder recorded no snapshot that travels: %w", errdefs.ErrNotFound)
	}
	if n.cfg.Snapshots == nil {
		return fmt.Errorf("this node restores no other node's snapshot: %w", errdefs.ErrUnsupported)
	}
	here, err := n.cfg.Snapshots.SnapshotHost(t)
	if err != nil {
		return err
	}
	return b.SnapshotHost.RestorableOn(here)
}

// stageSnapshot unpacks the snapshot artifact at art (its digest checked)
// into dir and checks it: regular files alone, by plain names, the
// description's host the recorded one, the layer tar one that applies
// inside a tree (checkLayerTar).
func (n *Node) stageSnapshot(ctx context.Context, art, dir string, recorded nodeapi.SnapshotHost) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.Open(art)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	seen := map[string]bool{}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("snapshot artifact: %w: %w", errdefs.ErrInvalid, err)
		}
		if h.Typeflag != tar.TypeReg || !plainName(h.Name) || seen[h.Name] || len(seen) >= maxSnapshotFiles {
			return fmt.Errorf("snapshot artifact: entry %q (type %q) is not one a node writes: %w", h.Name, h.Typeflag, errdefs.ErrInvalid)
		}
		seen[h.Name] = true
		out, err := os.OpenFile(filepath.Join(dir, h.Name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("snapshot artifact: %w", err)
		}
	}
	for _, need := range []string{nodeapi.SnapshotMetaFile, nodeapi.SnapshotLayerTar, "checkpoint.img"} {
		if !seen[need] {
			return fmt.Errorf("snapshot artifact: no %s: %w", need, errdefs.ErrInvalid)
		}
	}
	host, err := readSnapshotHost(dir)
	if err != nil {
		return fmt.Errorf("snapshot artifact: %w", err)
	}
	if host == nil || !host.Equal(recorded) {
		return fmt.Errorf("snapshot artifact: its description's host %+v is not the recorded %+v: %w", host, recorded, errdefs.ErrInvalid)
	}
	lt, err := os.Open(filepath.Join(dir, nodeapi.SnapshotLayerTar))
	if err != nil {
		return err
	}
	defer lt.Close()
	return checkLayerTar(lt)
}

// plainName reports whether name is a file name alone (no directory,
// not "." or "..", nothing hidden).
func plainName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "/\\\x00") && !strings.HasPrefix(name, ".")
}

// checkLayerTar reads a snapshot's layer tar through and refuses what the
// layer of a sandbox over its template does not hold: a path that is
// absolute, climbs out ("..") or passes through a symbolic link the tar
// made; a hard link to what it did not write before; a device node, FIFO
// or other special file; an extended attribute that does not travel
// (layer.PortableXattr). The unpack that applies it resolves every path
// inside its root besides (layer.Unpack).
func checkLayerTar(r io.Reader) error {
	tr := tar.NewReader(r)
	links := map[string]bool{}
	files := map[string]bool{}
	for count := 0; ; count++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("snapshot layer: %w: %w", errdefs.ErrInvalid, err)
		}
		bad := func(why string) error {
			return fmt.Errorf("snapshot layer: entry %q: %s: %w", h.Name, why, errdefs.ErrInvalid)
		}
		if count >= maxSnapshotLayerItems {
			return bad("too many entries")
		}
		name, ok := layerPath(h.Name)
		if !ok {
			return bad("not a path inside the layer")
		}
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if links[p] {
				return bad("below a symbolic link")
			}
		}
		for k := range h.PAXRecords {
			if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && !layer.PortableXattr(x) {
				return bad("extended attribute " + x + " does not travel")
			}
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir:
		case tar.TypeSymlink:
			links[name] = true
		case tar.TypeLink:
			target, ok := layerPath(h.Linkname)
			if !ok || !files[target] {
				return bad("a hard link to " + h.Linkname)
			}
		default:
			return bad(fmt.Sprintf("type %q", h.Typeflag))
		}
		if h.Typeflag == tar.TypeReg {
			files[name] = true
		}
	}
}

// layerPath is name cleaned, when it is a relative path that stays
// inside the layer.
func layerPath(name string) (string, bool) {
	name = strings.TrimSuffix(name, "/")
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsRune(name, 0) {
		return "", false
	}
	c := path.Clean(name)
	if c != name || c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", false
	}
	return c, true
}

// fetchPath receives artifact kind of buildID from holder h into dst,
// checked against want; h's grant is the leave. Whatever the holder
// answers, its failure is ErrUnavailable (the artifact could not be had
// from there), not the holder's own class.
func (n *Node) fetchPath(ctx context.Context, h *nodepb.BuildHolder, buildID string, kind nodepb.ArtifactKind, want Digest, dst string) error {
	if err := nodeauth.CheckRPCURL(h.GetAddress()); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := nodepbconnect.NewBuildServiceClient(n.cfg.HTTP, h.GetAddress(), clientOptions(bearer{grantHeader: nodeauth.HeaderGrant, grant: h.GetGrant()})...)
	stream, err := c.PullArtifact(ctx, connect.NewRequest(&nodepb.PullArtifactRequest{BuildId: buildID, Kind: kind}))
	if err != nil {
		return peerFailed(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return peerFailed(err)
		}
		return fmt.Errorf("the peer ended the stream before the artifact's digest: %w", errdefs.ErrUnavailable)
	}
	if got := stream.Msg().GetArtifact(); got.GetSha256() != want.SHA256 || got.GetSize() != want.Size {
		return fmt.Errorf("the peer serves %d bytes (sha256 %s), want %d (sha256 %s): %w: %w",
			got.GetSize(), got.GetSha256(), want.Size, want.SHA256, ErrDigestMismatch, errdefs.ErrUnavailable)
	}
	return Receive(&artifactReader{stream: stream}, want, dst)
}

// peerFailed is a holder's failure to serve an artifact: ErrUnavailable,
// with the holder's answer for the log only.
func peerFailed(err error) error {
	return fmt.Errorf("the peer answered %v: %w", fromRPC(err), errdefs.ErrUnavailable)
}

// artifactReader reads the data of a PullArtifact stream.
type artifactReader struct {
	stream *connect.ServerStreamForClient[nodepb.ArtifactChunk]
	data   []byte
}

func (r *artifactReader) Read(b []byte) (int, error) {
	for len(r.data) == 0 {
		if !r.stream.Receive() {
			if err := r.stream.Err(); err != nil {
				return 0, peerFailed(err)
			}
			return 0, io.EOF
		}
		r.data = r.stream.Msg().GetData()
	}
	n := copy(b, r.data)
	r.data = r.data[n:]
	return n, nil
}
