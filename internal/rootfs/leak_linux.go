package rootfs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Leaked lists the mounts and loop devices of layers under the data root
// whose sandbox is not in keep (keyed by sandbox ID). A mount counts as a
// layer's when it is the "rootfs" or "layer" directory of a directory
// holding layer.json; a loop device when its backing file is under the data
// root. Layer directories themselves (kept images of paused sandboxes) are
// not listed: their owner removes them with Destroy.
func (m *Manager) Leaked(ctx context.Context, keep map[string]bool) ([]Leak, error) {
	mounts, err := mountsUnder(m.cfg.DataRoot)
	if err != nil {
		return nil, fmt.Errorf("rootfs leaks: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	var out []Leak
	for _, mp := range mounts {
		base := filepath.Base(mp)
		if base != mergedDir && base != layerDir {
			continue
		}
		md, err := readMeta(filepath.Dir(mp))
		if err != nil {
			continue // not a layer of ours
		}
		if !keep[md.SandboxID] {
			out = append(out, Leak{Kind: "mount", Path: mp, SandboxID: md.SandboxID})
		}
	}
	loops, err := listLoops()
	if err != nil {
		return nil, fmt.Errorf("rootfs leaks: %w", errors.Join(errdefs.ErrUnavailable, err))
	}
	for _, l := range loops {
		if !within(m.cfg.DataRoot, l.Backing) || filepath.Base(l.Backing) != imageFile {
			continue
		}
		id := ""
		if md, err := readMeta(filepath.Dir(l.Backing)); err == nil {
			id = md.SandboxID
		}
		if id == "" || !keep[id] {
			out = append(out, Leak{Kind: "loop", Path: l.Dev, SandboxID: id})
		}
	}
	return out, nil
}

// ReclaimLeaked unmounts and detaches what Leaked lists and returns how
// many objects it released.
func (m *Manager) ReclaimLeaked(ctx context.Context, keep map[string]bool) (int, error) {
	leaks, err := m.Leaked(ctx, keep)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	// Mounts first (deepest first, as listed): unmounting a layer releases
	// its loop device by itself.
	for _, l := range leaks {
		if l.Kind != "mount" {
			continue
		}
		if err := unmountPath(l.Path); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		m.log.Info("reclaimed leaked mount", "sandbox_id", l.SandboxID, "path", l.Path)
	}
	attached := map[string]bool{}
	if loops, err := listLoops(); err == nil {
		for _, l := range loops {
			attached[l.Dev] = true
		}
	}
	for _, l := range leaks {
		if l.Kind != "loop" || !attached[l.Path] {
			continue // gone with its mount
		}
		if err := detachLoop(l.Path); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		m.log.Info("reclaimed leaked loop device", "sandbox_id", l.SandboxID, "device", l.Path)
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("rootfs reclaim: %w", errors.Join(append(errs, errdefs.ErrUnavailable)...))
	}
	return n, nil
}
