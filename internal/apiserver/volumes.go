package apiserver

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/volumes"
	"github.com/warren-sandbox/warren/pkg/client"
)

// E2B's Volume API (docs/volumes.md): a team's volumes at /volumes with
// its API key, their content at /volumecontent/{volumeID}/... with the
// volume's token (volumecontent.go).

// volumeJSON is E2B's Volume, with Warren's sizeMB.
type volumeJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	SizeMB   int64  `json:"sizeMB"`
}

// volumeAndTokenJSON is E2B's VolumeAndToken, with Warren's sizeMB.
type volumeAndTokenJSON struct {
	volumeJSON
	Token string `json:"token"`
}

func volumeOf(v *store.Volume) volumeJSON {
	return volumeJSON{VolumeID: v.ID, Name: v.Name, SizeMB: v.SizeMB}
}

// volumeRoutes adds the Volume API's routes; without a volume service
// they answer that the server has none.
func (s *Server) volumeRoutes(team func(handlerFunc) http.Handler) {
	s.handle("GET /volumes", team(s.listVolumes))
	s.handle("POST /volumes", team(s.createVolume))
	s.handle("GET /volumes/{volumeID}", team(s.getVolume))
	s.handle("DELETE /volumes/{volumeID}", team(s.destroyVolume))
	s.volumeContentRoutes()
}

// errNoVolumes answers a volume call of a server that keeps none.
var errNoVolumes = errdefs.Publicf(errdefs.ErrUnsupported, "volumes are not supported by this server")

// volumeLimits are the caller's volume limits.
func (s *Server) volumeLimits(c *caller) volumes.Limits {
	l := s.limits(c)
	return volumes.Limits{MaxVolumes: l.MaxVolumes, MaxVolumeSizeMB: l.MaxVolumeSizeMB, MaxVolumeStorageMB: l.MaxVolumeStorageMB}
}

func (s *Server) teamOnly(c *caller) error {
	if c.teamID == "" {
		return errdefs.Publicf(errdefs.ErrInvalid, "an admin acting on volumes must name the team in X-Team-ID")
	}
	if s.cfg.Volumes == nil {
		return errNoVolumes
	}
	return nil
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := s.teamOnly(c); err != nil {
		return err
	}
	vols, err := s.cfg.Volumes.List(r.Context(), c.teamID)
	if err != nil {
		return err
	}
	out := make([]volumeJSON, 0, len(vols))
	for _, v := range vols {
		out = append(out, volumeOf(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// createVolume answers POST /volumes {name, sizeMB?} (sizeMB is
// Warren's: the team's maxVolumeSizeMB when absent).
func (s *Server) createVolume(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := s.teamOnly(c); err != nil {
		return err
	}
	var req struct {
		Name   string `json:"name"`
		SizeMB *int64 `json:"sizeMB"`
	}
	if err := decode(r, &req, true); err != nil {
		return err
	}
	if req.Name == "" {
		return invalid("name", "required")
	}
	var size int64
	if req.SizeMB != nil {
		if *req.SizeMB <= 0 {
			return invalid("sizeMB", "must be positive, got %d", *req.SizeMB)
		}
		size = *req.SizeMB
	}
	v, err := s.cfg.Volumes.Create(r.Context(), c.teamID, req.Name, size, s.volumeLimits(c))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, volumeAndTokenJSON{volumeJSON: volumeOf(v), Token: v.Token})
	return nil
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := s.teamOnly(c); err != nil {
		return err
	}
	v, err := s.cfg.Volumes.Get(r.Context(), c.teamID, r.PathValue("volumeID"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, volumeAndTokenJSON{volumeJSON: volumeOf(v), Token: v.Token})
	return nil
}

// destroyVolume answers DELETE /volumes/{volumeID}[?force=true]: 409
// while a sandbox mounts the volume, unless forced (Warren's), which
// kills those sandboxes first.
func (s *Server) destroyVolume(w http.ResponseWriter, r *http.Request, c *caller) error {
	if err := s.teamOnly(c); err != nil {
		return err
	}
	force := false
	if f := r.URL.Query().Get("force"); f != "" {
		var err error
		if force, err = strconv.ParseBool(f); err != nil {
			return invalid("force", "want true or false, got %q", f)
		}
	}
	if err := s.cfg.Volumes.Destroy(r.Context(), c.teamID, r.PathValue("volumeID"), force); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// volumeMounts resolves a create's volumeMounts (E2B's [{name, path}])
// in the caller's team.
func (s *Server) volumeMounts(r *http.Request, c *caller, req []client.VolumeMount) ([]volumes.RequestedMount, error) {
	if len(req) == 0 {
		return nil, nil
	}
	if s.cfg.Volumes == nil {
		return nil, errdefs.Publicf(errdefs.ErrInvalid, "volumeMounts: volumes are not supported by this server")
	}
	out := make([]volumes.RequestedMount, 0, len(req))
	for i, m := range req {
		if m.Name == "" {
			return nil, invalid("volumeMounts["+strconv.Itoa(i)+"].name", "required")
		}
		out = append(out, volumes.RequestedMount{Name: m.Name, Path: m.Path})
	}
	return out, nil
}

// volumePathsOf are the paths sandbox sb mounts volumes at, sorted.
func volumePathsOf(sb *store.Sandbox) []string {
	var out []string
	for _, m := range volumes.MountsOf(sb) {
		out = append(out, m.Path)
	}
	slices.Sort(out)
	return out
}

// checkSnapshotVolumes refuses a create from a sandbox snapshot whose
// volume mounts are not at the paths the snapshotted sandbox had them: a
// restore finds what it held there by path (the node checks again).
func (s *Server) checkSnapshotVolumes(ctx context.Context, tmpl nodeapi.Template, mounts []volumes.RequestedMount) error {
	if s.cfg.Catalog == nil || tmpl.BuildID == "" {
		return nil
	}
	b, err := s.cfg.Catalog.Build(ctx, tmpl.BuildID)
	if err != nil || b.SandboxSnapshot == nil {
		return nil // not a sandbox snapshot (or the node tells)
	}
	want := b.SandboxSnapshot.VolumePaths
	var got []string
	for _, m := range mounts {
		got = append(got, m.Path)
	}
	slices.Sort(got)
	switch {
	case slices.Equal(want, got):
		return nil
	case len(want) == 0:
		return errdefs.Publicf(errdefs.ErrInvalid, "volumeMounts: template %q is a snapshot of a sandbox without volumes; volumes cannot be mounted into it", tmpl.ID)
	}
	return errdefs.Publicf(errdefs.ErrInvalid, "volumeMounts: template %q is a snapshot of a sandbox with volumes at %s; create its sandboxes with volumes at exactly those paths",
		tmpl.ID, strings.Join(want, ", "))
}
