package builder

import (
	"context"
	"fmt"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// A team's template storage (TeamLimits.StorageMB) is what its builds
// recorded in Build.DiskBytes: a ready build its directory (tree,
// snapshot on ready) and the layer cache entries it made, a failed one
// those entries only (its directory goes with the collector). A build
// does not start while the team is at its bound, and fails when it ends
// over it, so the team's templates pass the bound by at most the builds
// it runs at once.

// addLayer records a layer cache entry build buildID made.
func (b *Builder) addLayer(buildID, dir string) {
	b.layersMu.Lock()
	defer b.layersMu.Unlock()
	if b.layers == nil {
		b.layers = map[string][]string{}
	}
	b.layers[buildID] = append(b.layers[buildID], dir)
}

// takeLayers returns and forgets the layer cache entries build buildID
// made.
func (b *Builder) takeLayers(buildID string) []string {
	b.layersMu.Lock()
	defer b.layersMu.Unlock()
	l := b.layers[buildID]
	delete(b.layers, buildID)
	return l
}

// layersOf returns the layer cache entries build buildID made so far.
func (b *Builder) layersOf(buildID string) []string {
	b.layersMu.Lock()
	defer b.layersMu.Unlock()
	return append([]string(nil), b.layers[buildID]...)
}

// buildBytes is the disk build buildID takes: its layer cache entries
// and, when withDir, its build directory.
func (b *Builder) buildBytes(buildID string, layers []string, withDir bool) int64 {
	dirs := layers
	if withDir {
		dirs = append(dirs, b.cat.BuildDir(buildID))
	}
	return usedBytes(dirs...)
}

// CheckStorage refuses a build of team that would take the team's
// templates past limitMB with adding bytes of its own.
func CheckStorage(ctx context.Context, cat *templates.Catalog, teamID string, limitMB, adding int64) error {
	if limitMB <= 0 || teamID == "" {
		return nil
	}
	used, err := cat.TeamDiskBytes(ctx, teamID)
	if err != nil {
		return err
	}
	switch {
	case adding == 0 && used >= limitMB<<20:
		return errdefs.Publicf(errdefs.ErrExhausted, "the team's templates take %d MiB of disk, the most its limit allows (%d MiB): delete templates it no longer needs", used>>20, limitMB)
	case adding > 0 && used+adding > limitMB<<20:
		return errdefs.Publicf(errdefs.ErrExhausted, "with this build (%d MiB) the team's templates would take %d MiB of disk, more than its limit of %d MiB: delete templates it no longer needs", adding>>20, (used+adding)>>20, limitMB)
	}
	return nil
}

// recordBytes stores the disk a finished build takes.
func (b *Builder) recordBytes(ctx context.Context, buildID string, bytes int64) {
	if _, err := b.cat.UpdateBuild(ctx, buildID, func(bd *templates.Build) error { bd.DiskBytes = bytes; return nil }); err != nil {
		b.log.Warn("record build disk use", "build_id", buildID, "error", fmt.Errorf("%w", err))
	}
}
