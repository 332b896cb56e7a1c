package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// SnapshotSandboxInto takes a snapshot of running sandbox id into dir,
// leaving the sandbox running (E2B's POST /sandboxes/{id}/snapshots): the
// sandbox is frozen when the driver can, its memory checkpointed into dir,
// its writable layer saved and, with travel when this node's snapshots can
// travel (SnapshotHost), its layer's changes written beside as
// nodeapi.SnapshotLayerTar with the host recorded, then thawed. The result
// has the layout of a template snapshot on ready, so a sandbox created
// with Template.SnapshotDir = dir restores it (processes, memory and files
// of the source), here or, imported (ImportSnapshot), on another node. It
// returns the template the sandbox was started from, whose root
// filesystem the snapshot's layer lies over. A driver that cannot
// checkpoint memory gives ErrUnsupported; a sandbox that is not running
// ErrConflict. Delete the snapshot with DeleteSnapshot. The node contract's
// part (nodeapi.SandboxSnapshotter, which names no directory) is
// internal/nodebuild.SandboxSnapshots over this.
func (a *Agent) SnapshotSandboxInto(ctx context.Context, id, dir string, travel bool) (nodeapi.Template, error) {
	h, err := a.lookup(id)
	if err != nil {
		return nodeapi.Template{}, err
	}
	ckpt, ok := a.checkpointer()
	if !ok {
		return nodeapi.Template{}, fmt.Errorf("sandbox %q: snapshot: driver %s cannot checkpoint memory: %w", id, a.drv.Name(), errdefs.ErrUnsupported)
	}
	if _, err := h.admitCheckpoint(); err != nil {
		return nodeapi.Template{}, err
	}
	defer h.setCheckpointing(false)
	return h.snapshotInto(ctx, ckpt, dir, travel)
}

// snapshotInto takes the snapshot of SnapshotSandboxInto under h.op.
func (h *handle) snapshotInto(ctx context.Context, ckpt driver.Checkpointer, dir string, travel bool) (nodeapi.Template, error) {
	a, id := h.a, h.id
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	st := h.get()
	alive := !st.gone && st.rec.State == sandbox.StateRunning
	tmpl := st.rec.Template
	tmpl.Env = maps.Clone(tmpl.Env)
	initToken := st.rec.InitToken
	shape := nodeapi.Template{ID: tmpl.ID, BuildID: tmpl.BuildID, Resources: st.rec.Resources}
	volPaths := volumePaths(st.rec.Volumes)
	if !alive {
		return nodeapi.Template{}, fmt.Errorf("sandbox %q stopped: %w", id, errdefs.ErrConflict)
	}
	log := a.log.With("sandbox_id", id, "dir", dir)

	// Frozen, the memory image and the saved layer show the same moment.
	if fr, ok := a.drv.(driver.Freezer); ok && a.drv.Capabilities().Freeze {
		if err := fr.Freeze(ctx, id); err != nil {
			return nodeapi.Template{}, fmt.Errorf("sandbox %q: snapshot: freeze: %w", id, err)
		}
		defer func() {
			if err := fr.Thaw(context.WithoutCancel(ctx), id); err != nil {
				log.Warn("thaw after snapshot", "error", err)
			}
		}()
	}
	if err := os.RemoveAll(dir); err != nil {
		return nodeapi.Template{}, fmt.Errorf("sandbox %q: snapshot dir: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nodeapi.Template{}, fmt.Errorf("sandbox %q: snapshot dir: %w", id, err)
	}
	fail := func(err error) (nodeapi.Template, error) {
		os.RemoveAll(dir)
		return nodeapi.Template{}, fmt.Errorf("sandbox %q: snapshot: %w", id, err)
	}
	if err := ckpt.Checkpoint(ctx, id, dir, driver.CheckpointOptions{LeaveRunning: true}); err != nil {
		return fail(fmt.Errorf("checkpoint: %w", err))
	}
	layer := sandbox.NewID()
	if err := a.cfg.Layers.Save(ctx, id, layer); err != nil {
		return fail(fmt.Errorf("save writable layer: %w", err))
	}
	meta := snapshotMeta{Version: 1, InitToken: initToken, Layer: layer, TakenAt: a.clock.Now().UTC(), VolumePaths: volPaths}
	// Still frozen: the layer's changes are those of the memory image.
	if travel {
		if host, err := a.exportSnapshotLayer(ctx, id, shape, dir); err != nil {
			log.Info("sandbox snapshot stays on this node: its layer could not be written for others", "error", err)
		} else {
			meta.Host = host
		}
	}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(dir, snapshotMetaFile), b, 0o600); err != nil {
		_ = a.cfg.Layers.DeleteSaved(context.WithoutCancel(ctx), layer)
		return fail(err)
	}
	log.Info("sandbox snapshot taken", "layer", layer, "portable", meta.Host != nil)
	tmpl.SnapshotDir = ""
	return tmpl, nil
}
