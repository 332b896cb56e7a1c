// Package rootfslayers gives the node agent its per-sandbox root
// filesystems from package rootfs: node.Layers over a *rootfs.Manager, with
// one layer directory per sandbox, <root>/sbx-<id>.
package rootfslayers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/node/layer"
	"github.com/warren-sandbox/warren/internal/rootfs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Layers implements node.Layers over a rootfs.Manager whose DataRoot is
// root.
type Layers struct {
	m    *rootfs.Manager
	root string
}

var (
	_ node.Layers      = (*Layers)(nil)
	_ node.LayerPorter = (*Layers)(nil)
)

// New returns the layers of m, whose Config.DataRoot must be root.
func New(m *rootfs.Manager, root string) *Layers {
	return &Layers{m: m, root: filepath.Clean(root)}
}

func (l *Layers) dir(id string) string { return filepath.Join(l.root, sandbox.HostName(id)) }

// Create implements node.Layers.
func (l *Layers) Create(ctx context.Context, id, lower string, sizeMB int64) (string, error) {
	return l.m.Prepare(ctx, rootfs.Layer{SandboxID: id, Lower: lower, Dir: l.dir(id), DiskMB: sizeMB})
}

// Mount implements node.Layers.
func (l *Layers) Mount(ctx context.Context, id, lower string) (string, error) {
	return l.m.Remount(ctx, rootfs.Layer{SandboxID: id, Lower: lower, Dir: l.dir(id)}, "")
}

// Unmount implements node.Layers.
func (l *Layers) Unmount(ctx context.Context, id string) error {
	return l.m.Unmount(ctx, l.dir(id))
}

// Copy implements node.Layers.
func (l *Layers) Copy(ctx context.Context, src, dst string) error {
	return l.m.Copy(ctx, rootfs.Layer{SandboxID: dst, Dir: l.dir(dst)}, l.dir(src))
}

// Destroy implements node.Layers.
func (l *Layers) Destroy(ctx context.Context, id string) error {
	return l.m.Destroy(ctx, l.dir(id))
}

// savedDir is the directory of saved layer name. Its "tpl-" prefix keeps
// it out of the sandboxes' leak reclaim.
func (l *Layers) savedDir(name string) string { return filepath.Join(l.root, "tpl-"+name) }

// Save implements node.Layers.
func (l *Layers) Save(ctx context.Context, id, name string) error {
	return l.m.Copy(ctx, rootfs.Layer{SandboxID: "tpl-" + name, Dir: l.savedDir(name)}, l.dir(id))
}

// CreateFrom implements node.Layers.
func (l *Layers) CreateFrom(ctx context.Context, id, name, lower string) (string, error) {
	return l.m.Remount(ctx, rootfs.Layer{SandboxID: id, Lower: lower, Dir: l.dir(id)}, l.savedDir(name))
}

// DeleteSaved implements node.Layers.
func (l *Layers) DeleteSaved(ctx context.Context, name string) error {
	return l.m.Destroy(ctx, l.savedDir(name))
}

// ExportLayer implements node.LayerPorter: the upper directory of id's
// mounted layer as an OCI layer tar (layer.WriteDiff).
func (l *Layers) ExportLayer(ctx context.Context, id string, w io.Writer, keep func(string) bool) error {
	return layer.WriteDiff(ctx, rootfs.UpperDir(l.dir(id)), w, keep)
}

// ImportSaved implements node.LayerPorter: a new layer of sizeMB over
// lower, the OCI layer tar r applied through its overlay (layer.Unpack,
// its whiteouts deleting from lower), kept unmounted as saved layer name.
func (l *Layers) ImportSaved(ctx context.Context, name, lower string, sizeMB int64, r io.Reader, keep func(string) bool) error {
	dir := l.savedDir(name)
	merged, err := l.m.Prepare(ctx, rootfs.Layer{SandboxID: "tpl-" + name, Lower: lower, Dir: dir, DiskMB: sizeMB})
	if err != nil {
		return fmt.Errorf("saved layer %s: %w", name, err)
	}
	err = layer.Unpack(ctx, r, merged, layer.Options{Xattr: keep, MaxBytes: sizeMB << 20, What: " of a saved layer"})
	if uerr := l.m.Unmount(context.WithoutCancel(ctx), dir); err == nil && uerr != nil {
		err = uerr
	}
	if err != nil {
		_ = l.m.Destroy(context.WithoutCancel(ctx), dir)
		return fmt.Errorf("saved layer %s: %w", name, err)
	}
	return nil
}

// Usage implements node.Layers: an overlay reports the file system of its
// upper layer, the sandbox's ext4 image.
func (l *Layers) Usage(ctx context.Context, id string) (used, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(rootfs.MergedDir(l.dir(id)), &st); err != nil {
		return 0, 0, fmt.Errorf("layer of %q: %w", id, errors.Join(errdefs.ErrUnavailable, err))
	}
	total = st.Blocks * uint64(st.Bsize)
	return total - st.Bfree*uint64(st.Bsize), total, nil
}

// ReclaimLeaked implements node.Layers: mounts and loop devices of
// sandboxes not in mounted (kind "mount", loop devices included), then the
// layer directories of sandboxes not in known (kind "layer").
func (l *Layers) ReclaimLeaked(ctx context.Context, mounted, known map[string]bool) (map[string]int, error) {
	out := map[string]int{}
	var errs []error
	n, err := l.m.ReclaimLeaked(ctx, mounted)
	out["mount"] = n
	if err != nil {
		errs = append(errs, err)
	}
	entries, err := os.ReadDir(l.root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		id, ok := strings.CutPrefix(e.Name(), "sbx-")
		if !ok || !e.IsDir() || !sandbox.ValidID(id) || known[id] {
			continue
		}
		if err := l.m.Destroy(ctx, l.dir(id)); err != nil {
			errs = append(errs, err)
			continue
		}
		out["layer"]++
	}
	return out, errors.Join(errs...)
}
