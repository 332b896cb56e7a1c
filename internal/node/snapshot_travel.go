package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// SnapshotHost describes this node for a snapshot of template t: the
// runtime, the CPU's flags and the shape a sandbox of t gets here (its own
// resources, the node's defaults for the rest). A node whose layers or
// configuration cannot carry snapshots gives ErrUnsupported.
func (a *Agent) SnapshotHost(t nodeapi.Template) (nodeapi.SnapshotHost, error) {
	if _, ok := a.cfg.Layers.(LayerPorter); !ok || a.cfg.SnapshotRuntime == "" {
		return nodeapi.SnapshotHost{}, fmt.Errorf("template snapshots do not travel to or from this node (driver %s): %w", a.drv.Name(), errdefs.ErrUnsupported)
	}
	if _, ok := a.checkpointer(); !ok {
		return nodeapi.SnapshotHost{}, fmt.Errorf("driver %s cannot checkpoint memory: %w", a.drv.Name(), errdefs.ErrUnsupported)
	}
	info, err := os.ReadFile(a.cfg.CPUInfo)
	if err != nil {
		return nodeapi.SnapshotHost{}, fmt.Errorf("cpu flags: %w: %w", errdefs.ErrUnavailable, err)
	}
	a.envdSum.once.Do(func() { a.envdSum.v, a.envdSum.err = fileSHA256(a.cfg.EnvdPath) })
	if a.envdSum.err != nil {
		return nodeapi.SnapshotHost{}, fmt.Errorf("envd: %w: %w", errdefs.ErrUnavailable, a.envdSum.err)
	}
	r := a.resources(t.Resources)
	return nodeapi.SnapshotHost{Runtime: a.cfg.SnapshotRuntime, Envd: a.envdSum.v, CPUFlags: nodeapi.ParseCPUFlags(string(info)),
		VCPUs: r.VCPUs, MemoryMB: r.MemoryMB, TmpMB: nodeapi.TmpMB(r.MemoryMB), DiskMB: r.DiskMB}, nil
}

// exportSnapshotLayer writes the changes of snapshot sandbox id's layer
// (stopped by its checkpoint, still mounted) into dir as
// nodeapi.SnapshotLayerTar and returns what the snapshot was taken with.
func (a *Agent) exportSnapshotLayer(ctx context.Context, id string, t nodeapi.Template, dir string) (*nodeapi.SnapshotHost, error) {
	host, err := a.SnapshotHost(t)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, nodeapi.SnapshotLayerTar)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	err = a.cfg.Layers.(LayerPorter).ExportLayer(ctx, id, f, layer.PortableXattr)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return &host, nil
}

// ImportSnapshot makes the template snapshot another node took, whose
// files are in dir (its memory image, nodeapi.SnapshotMetaFile and
// nodeapi.SnapshotLayerTar, their digest already checked), restorable here over
// t.RootFS: the snapshot's host is checked against this node's
// (SnapshotHost; ErrUnsupported for one it cannot restore), its layer tar
// applied into a saved layer of this node's own, and the description
// rewritten to name it. On success sandboxes of t with SnapshotDir = dir
// restore it; on failure nothing is left but dir's files.
func (a *Agent) ImportSnapshot(ctx context.Context, t nodeapi.Template, dir string) error {
	m, err := readSnapshotMeta(dir)
	if err != nil {
		return err
	}
	if m.Host == nil {
		return fmt.Errorf("template snapshot %s: taken for its node alone: %w", dir, errdefs.ErrUnsupported)
	}
	here, err := a.SnapshotHost(t)
	if err != nil {
		return err
	}
	if err := m.Host.RestorableOn(here); err != nil {
		return fmt.Errorf("template snapshot %s: %w", dir, err)
	}
	if t.RootFS == "" {
		return fmt.Errorf("template snapshot %s: template %q has no root filesystem here: %w", dir, t.ID, errdefs.ErrInvalid)
	}
	lt, err := os.Open(filepath.Join(dir, nodeapi.SnapshotLayerTar))
	if err != nil {
		return fmt.Errorf("template snapshot %s: %w: %w", dir, errdefs.ErrInvalid, err)
	}
	defer lt.Close()
	name := sandbox.NewID()
	if err := a.cfg.Layers.(LayerPorter).ImportSaved(ctx, name, t.RootFS, m.Host.DiskMB, lt, layer.PortableXattr); err != nil {
		return fmt.Errorf("template snapshot %s: %w", dir, err)
	}
	m.Layer = name
	b, _ := json.Marshal(m)
	tmp := filepath.Join(dir, snapshotMetaFile+".tmp")
	err = os.WriteFile(tmp, b, 0o600)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, snapshotMetaFile))
	}
	if err != nil {
		return errors.Join(fmt.Errorf("template snapshot %s: %w", dir, err), a.cfg.Layers.DeleteSaved(context.WithoutCancel(ctx), name))
	}
	return nil
}

// fileSHA256 is "sha256:" and the hex sha256 of the file at p.
func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
