package node

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/warren-sandbox/warren/internal/driver"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// VolumeMounter gives the agent the mounts of its sandboxes' volumes
// (internal/node/volumes.Manager, docs/volumes.md). A sandbox's volumes
// are in its record (record.Volumes); the agent acquires them every time
// it makes the sandbox's runtime spec (a create, a resume, a fork's
// copy, a restore made ready ahead) and after a restart for every
// sandbox it keeps, and releases them when the sandbox is gone.
type VolumeMounter interface {
	// Acquire records that sandbox sandboxID of team teamID mounts
	// mounts (exactly these, replacing what it had) and returns their
	// bind mounts. A volume the node does not hold, or of another team,
	// is ErrNotFound.
	Acquire(sandboxID, teamID string, mounts []nodeapi.VolumeMount) ([]driver.Mount, error)
	// Release records that sandbox sandboxID mounts nothing any more.
	Release(sandboxID string)
}

// volumeMounts acquires the volumes of the sandbox of record r for its
// runtime spec, sorted by path (a restore finds its mounts as they were).
func (a *Agent) volumeMounts(r record) ([]driver.Mount, error) {
	if len(r.Volumes) == 0 {
		return nil, nil
	}
	if a.cfg.Volumes == nil {
		return nil, errdefs.Publicf(errdefs.ErrUnsupported, "this node keeps no volumes")
	}
	ms, err := a.cfg.Volumes.Acquire(r.ID, r.TeamID, r.Volumes)
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	slices.SortFunc(ms, func(x, y driver.Mount) int { return strings.Compare(x.Destination, y.Destination) })
	return ms, nil
}

// releaseVolumes records that sandbox id is gone.
func (a *Agent) releaseVolumes(id string) {
	if a.cfg.Volumes != nil {
		a.cfg.Volumes.Release(id)
	}
}

// reacquireVolumes records, after a restart, the volumes of the
// sandboxes the agent kept (running or paused), so that none is deleted
// under them. A volume gone meanwhile is logged: the sandbox's resume
// will fail on it.
func (a *Agent) reacquireVolumes() {
	if a.cfg.Volumes == nil {
		return
	}
	for _, h := range a.handles() {
		r := h.get().rec
		if len(r.Volumes) == 0 {
			continue
		}
		if _, err := a.cfg.Volumes.Acquire(r.ID, r.TeamID, r.Volumes); err != nil {
			a.log.Warn("a volume of a recovered sandbox is gone", "sandbox_id", r.ID, "error", err)
		}
	}
}

// volumePaths are the mount paths of mounts, sorted.
func volumePaths(mounts []nodeapi.VolumeMount) []string {
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, m.Path)
	}
	slices.Sort(out)
	return out
}

// checkSnapshotVolumes refuses a create from a snapshot taken of a
// sandbox with volumes that does not mount volumes at the same paths: the
// memory image holds those mounts (open files, a working directory), and
// a restore finds them again by path. The volumes' content is not in the
// snapshot; the create's volumes are mounted as they are now.
func checkSnapshotVolumes(m *snapshotMeta, templateID string, mounts []nodeapi.VolumeMount) error {
	want, got := m.VolumePaths, volumePaths(mounts)
	if slices.Equal(want, got) || (len(want) == 0 && len(got) == 0) {
		return nil
	}
	if len(want) == 0 {
		return errdefs.Publicf(errdefs.ErrInvalid, "template %q starts from a snapshot of a sandbox without volumes: volumes cannot be mounted into it", templateID)
	}
	return errdefs.Publicf(errdefs.ErrInvalid, "template %q is a snapshot of a sandbox with volumes at %s: create its sandboxes with volumeMounts at exactly those paths",
		templateID, strings.Join(want, ", "))
}

// volumeResumeFallback is the start mode of a resume of h, paused with
// memory and mounting volumes, whose restore failed with err: it boots
// again on its writable layer, as a resume of a sandbox paused without
// memory does. The restore reopens, by path, what the sandbox held open
// on its volumes (gVisor's gofer), and another sandbox or the content API
// may have removed one of those files while it was paused; its disk and
// its volumes are kept, its processes are not (docs/volumes.md). The
// caller holds h.op.
func (h *handle) volumeResumeFallback(ph *phaseTimer, log *slog.Logger, err error) startMode {
	log.Warn("memory restore of a sandbox with volumes failed (a file it held open on a volume may be gone); booting it again on its disk", "error", err)
	h.setGuestMemory(0) // a fresh boot: nothing of the first boot's mounts to match
	return startMode{layerExists: true, runStartCmd: true, phases: ph}
}

// setGuestMemory sets the memory size h's guest boots with (0: its
// resources').
func (h *handle) setGuestMemory(mb int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rec.GuestMemoryMB = mb
}
