package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// snapshotMetaFile describes a template snapshot, beside the memory image
// in its directory.
const snapshotMetaFile = nodeapi.SnapshotMetaFile

// snapshotMeta is what a sandbox restored from a template snapshot needs
// besides the memory image: the init token the image's envd expects, and
// the saved writable layer the image was taken with.
type snapshotMeta struct {
	Version   int       `json:"version"`
	InitToken string    `json:"initToken"`
	Layer     string    `json:"layer"`
	TakenAt   time.Time `json:"takenAt"`
	// Host, when set, is what the snapshot was taken with, and the
	// directory holds its layer's changes as nodeapi.SnapshotLayerTar: it can
	// travel to another node (ImportSnapshot).
	Host *nodeapi.SnapshotHost `json:"host,omitempty"`
	// VolumePaths are where the snapshotted sandbox mounted volumes
	// (volumes.go's checkSnapshotVolumes): their content is not in it.
	VolumePaths []string `json:"volumePaths,omitempty"`
}

// Timing of Snapshot's readiness check.
const (
	readyCmdInterval = time.Second
	readyCmdTimeout  = 5 * time.Minute
	// settleWithoutReadyCmd is how long the start command runs before the
	// snapshot when the template has no ready command.
	settleWithoutReadyCmd = 2 * time.Second
)

// Snapshot takes a template's snapshot on ready into dir (it implements
// the builder's Snapshotter): it starts a sandbox of t, whose start command
// runs, retries readyCmd until it exits 0, and checkpoints the sandbox's
// memory into dir and its writable layer into a saved layer. Sandboxes
// created with Template.SnapshotDir = dir then restore it instead of
// booting. A driver that cannot checkpoint gives ErrUnsupported.
func (a *Agent) Snapshot(ctx context.Context, t nodeapi.Template, readyCmd, dir string) (err error) {
	ckpt, ok := a.checkpointer()
	if !ok {
		return fmt.Errorf("template %q: snapshot: driver %s cannot checkpoint memory: %w", t.ID, a.drv.Name(), errdefs.ErrUnsupported)
	}
	t.SnapshotDir = ""
	id := "snap" + sandbox.NewID()[:16]
	log := a.log.With("sandbox_id", id, "template_id", t.ID, "build_id", t.BuildID)
	// The sandbox is sized as creates of the template are (its own
	// resources, the node's defaults for the rest): a restore must see the
	// mounts the checkpoint saw, and the guest's /tmp is sized from its
	// memory.
	sb, err := a.create(ctx, nodeapi.CreateRequest{ID: id, Template: t, Resources: t.Resources, Network: netslot.Policy{Internet: true}}, true)
	if err != nil {
		return fmt.Errorf("template %q: snapshot sandbox: %w", t.ID, err)
	}
	h, err := a.lookup(id)
	if err != nil {
		return err
	}
	defer h.discard(context.WithoutCancel(ctx), log.With("kill_reason", "snapshot_taken"))

	if err := a.waitReady(ctx, sb, t, readyCmd); err != nil {
		return fmt.Errorf("template %q: snapshot: %w", t.ID, err)
	}
	return h.snapshotTemplate(ctx, ckpt, t, dir, log)
}

// snapshotTemplate checkpoints h, the ready sandbox of template t's
// snapshot, into dir and saves its layer (Snapshot).
func (h *handle) snapshotTemplate(ctx context.Context, ckpt driver.Checkpointer, t nodeapi.Template, dir string, log *slog.Logger) error {
	a, id := h.a, h.id
	h.op.Lock()
	defer h.op.Unlock()
	h.awaitPrepare()
	if _, err := h.markPausing(); err != nil {
		return fmt.Errorf("template %q: snapshot sandbox stopped before it was ready: %w", t.ID, errdefs.ErrUnavailable)
	}
	initToken := h.get().rec.InitToken

	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("template %q: snapshot dir: %w", t.ID, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("template %q: snapshot dir: %w", t.ID, err)
	}
	if err := ckpt.Checkpoint(ctx, id, dir, driver.CheckpointOptions{}); err != nil {
		return fmt.Errorf("template %q: checkpoint: %w", t.ID, err)
	}
	layer := sandbox.NewID()
	if err := a.cfg.Layers.Save(ctx, id, layer); err != nil {
		return fmt.Errorf("template %q: save writable layer: %w", t.ID, err)
	}
	meta := snapshotMeta{Version: 1, InitToken: initToken, Layer: layer, TakenAt: a.clock.Now().UTC()}
	if host, err := a.exportSnapshotLayer(ctx, id, t, dir); err != nil {
		log.Warn("template snapshot stays on this node: its layer could not be written for others", "error", err)
	} else {
		meta.Host = host
	}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(dir, snapshotMetaFile), b, 0o600); err != nil {
		_ = a.cfg.Layers.DeleteSaved(context.WithoutCancel(ctx), layer)
		return fmt.Errorf("template %q: snapshot: %w", t.ID, err)
	}
	log.Info("template snapshot taken", "dir", dir, "layer", layer, "portable", meta.Host != nil)
	return nil
}

// waitReady lets the start command run until readyCmd passes.
func (a *Agent) waitReady(ctx context.Context, sb *nodeapi.Sandbox, t nodeapi.Template, readyCmd string) error {
	wait := func(d time.Duration) error {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tm.C:
			return nil
		}
	}
	if readyCmd == "" {
		return wait(settleWithoutReadyCmd)
	}
	deadline := a.clock.Now().Add(readyCmdTimeout)
	p := EnvdProcess{Cmd: "/bin/bash", Args: []string{"-l", "-c", readyCmd}, User: orDefault(t.User, "user"), Cwd: orDefault(t.Workdir, "/home/user")}
	for {
		rctx, cancel := context.WithTimeout(ctx, readyCmdTimeout)
		code, err := a.cfg.Envd.Run(rctx, sb.Address, "", p)
		cancel()
		if err == nil && code == 0 {
			return nil
		}
		if a.clock.Now().After(deadline) {
			return fmt.Errorf("ready command %q did not pass within %s (exit %d, %v): %w", readyCmd, readyCmdTimeout, code, err, errdefs.ErrUnavailable)
		}
		if err := wait(readyCmdInterval); err != nil {
			return err
		}
	}
}

// readSnapshotMeta reads the description of the template snapshot in dir.
func readSnapshotMeta(dir string) (*snapshotMeta, error) {
	b, err := os.ReadFile(filepath.Join(dir, snapshotMetaFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("template snapshot %s: not taken by a node agent: %w", dir, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("template snapshot %s: %w", dir, err)
	}
	var m snapshotMeta
	if err := json.Unmarshal(b, &m); err != nil || m.Version != 1 || !sandbox.ValidID(m.Layer) {
		return nil, fmt.Errorf("template snapshot %s: bad %s: %w", dir, snapshotMetaFile, errdefs.ErrInvalid)
	}
	return &m, nil
}

// DeleteSnapshot deletes the template snapshot in dir with its saved
// layer (when its template build is deleted).
func (a *Agent) DeleteSnapshot(ctx context.Context, dir string) error {
	m, err := readSnapshotMeta(dir)
	if err == nil {
		if err := a.cfg.Layers.DeleteSaved(ctx, m.Layer); err != nil {
			return fmt.Errorf("template snapshot %s: %w", dir, err)
		}
	} else if !errdefs.IsNotFound(err) {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("template snapshot %s: %w", dir, err)
	}
	return nil
}
