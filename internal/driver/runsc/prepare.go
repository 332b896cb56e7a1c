package runsc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// PrepareRestore implements driver.RestorePreparer: it writes spec's
// bundle and runs `runsc create`, which starts the sandbox's gofer and
// sentry and waits; RestorePrepared then loads an image into it. Kill of
// a prepared sandbox does nothing (nothing runs in it); Delete removes it.
func (d *Driver) PrepareRestore(ctx context.Context, spec driver.Spec) error {
	return d.made(spec, func(p *start) error {
		if err := d.runCreate(ctx, p, "create", "create", "--bundle", spec.BundleDir, spec.ID); err != nil {
			return err
		}
		d.prepMu.Lock()
		defer d.prepMu.Unlock()
		d.prepared[spec.ID] = p
		return nil
	})
}

// RestorePrepared implements driver.RestorePreparer with `runsc restore
// -detach` of the image in dir into the sandbox PrepareRestore created
// (runsc restores into a container it holds instead of creating one).
func (d *Driver) RestorePrepared(ctx context.Context, id, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		return fmt.Errorf("sandbox %q: checkpoint image in %s: %v: %w", id, dir, err, errdefs.ErrNotFound)
	}
	p := d.takePrepared(id)
	if p == nil {
		return fmt.Errorf("sandbox %q: not prepared for a restore: %w", id, errdefs.ErrNotFound)
	}
	err := d.underNetwork(p, func() error {
		if err := d.runCreate(ctx, p, "restore", "restore", "-detach", "--image-path", dir, id); err != nil {
			return err
		}
		return d.started(p, "restore")
	})
	if err != nil {
		// Left for Delete, which must know it never started.
		d.prepMu.Lock()
		defer d.prepMu.Unlock()
		if p.b.Watcher() == nil {
			d.prepared[id] = p
		}
		return err
	}
	return nil
}

// isPrepared reports whether id is a prepared sandbox not yet restored.
func (d *Driver) isPrepared(id string) bool {
	d.prepMu.Lock()
	defer d.prepMu.Unlock()
	return d.prepared[id] != nil
}

// takePrepared removes id from the prepared sandboxes and returns it, nil
// when it was not prepared.
func (d *Driver) takePrepared(id string) *start {
	d.prepMu.Lock()
	defer d.prepMu.Unlock()
	p := d.prepared[id]
	delete(d.prepared, id)
	return p
}
