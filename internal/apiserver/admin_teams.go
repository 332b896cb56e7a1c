package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// teamIDPattern is what a team ID may be: it names the team's namespace in
// template references ("team/name"), so it follows the template name rules
// without '/' and '.'.
var teamIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,39}$`)

// ValidTeamID checks a team ID chosen by the operator.
func ValidTeamID(id string) error {
	if !teamIDPattern.MatchString(id) {
		return errdefs.Publicf(errdefs.ErrInvalid, "team id %q: 1 to 40 lowercase letters, digits, '-' and '_', starting with a letter or digit", id)
	}
	return nil
}

// CreateTeam adds a team (a new random ID when id is empty) with one API
// key, returned in clear: it is shown once and never stored. The CLI
// (warren team create) and POST /admin/teams share it.
func CreateTeam(ctx context.Context, st store.Store, id, name string, lim store.Limits) (*store.Team, string, error) {
	if id == "" {
		id = "team-" + sandbox.RandomToken(6)
	}
	if err := ValidTeamID(id); err != nil {
		return nil, "", err
	}
	if name == "" {
		name = id
	}
	if err := ValidLimits(lim); err != nil {
		return nil, "", err
	}
	t := &store.Team{ID: id, Name: name, Limits: lim}
	if err := st.CreateTeam(ctx, t); err != nil {
		return nil, "", err
	}
	key, _, err := AddKey(ctx, st, id, "first", "")
	if err != nil {
		return nil, "", err
	}
	return t, key, nil
}

// ValidLimits checks team limits set by the operator.
func ValidLimits(l store.Limits) error {
	switch {
	case l.MaxConcurrent < 0, l.MaxVCPUs < 0, l.MaxMemoryMB < 0, l.MaxDiskMB < 0, l.MaxPaused < 0, l.MaxSnapshots < 0, l.MaxTimeout < 0,
		l.MaxBuilds < 0, l.MaxWebhooks < 0, l.MaxTemplateStorageMB < 0, l.MaxVolumes < 0, l.MaxVolumeSizeMB < 0, l.MaxVolumeStorageMB < 0:
		return errdefs.Publicf(errdefs.ErrInvalid, "team limits must not be negative (0 means the server default)")
	}
	return nil
}

// limitsJSON is a team's limits on the wire; 0 means the server's
// default. In a PATCH, absent fields keep their value.
type limitsJSON struct {
	MaxConcurrent     *int   `json:"maxConcurrent,omitempty"`
	MaxVCPUs          *int   `json:"maxVCPUs,omitempty"`
	MaxMemoryMB       *int64 `json:"maxMemoryMB,omitempty"`
	MaxDiskMB         *int64 `json:"maxDiskMB,omitempty"`
	MaxTimeoutSeconds *int64 `json:"maxTimeoutSeconds,omitempty"`
	MaxPaused         *int   `json:"maxPaused,omitempty"`
	MaxSnapshots      *int   `json:"maxSnapshots,omitempty"`
	// MaxBuilds, MaxWebhooks and MaxTemplateStorageMB bound the team's
	// builds running at once, its webhooks and its templates' disk.
	MaxBuilds            *int   `json:"maxBuilds,omitempty"`
	MaxWebhooks          *int   `json:"maxWebhooks,omitempty"`
	MaxTemplateStorageMB *int64 `json:"maxTemplateStorageMB,omitempty"`
	// MaxVolumes, MaxVolumeSizeMB and MaxVolumeStorageMB bound the team's
	// volumes: their number, one volume's size, their sizes' sum.
	MaxVolumes         *int   `json:"maxVolumes,omitempty"`
	MaxVolumeSizeMB    *int64 `json:"maxVolumeSizeMB,omitempty"`
	MaxVolumeStorageMB *int64 `json:"maxVolumeStorageMB,omitempty"`
}

func limitsOf(l store.Limits) limitsJSON {
	secs := int64(l.MaxTimeout / time.Second)
	return limitsJSON{&l.MaxConcurrent, &l.MaxVCPUs, &l.MaxMemoryMB, &l.MaxDiskMB, &secs, &l.MaxPaused, &l.MaxSnapshots,
		&l.MaxBuilds, &l.MaxWebhooks, &l.MaxTemplateStorageMB, &l.MaxVolumes, &l.MaxVolumeSizeMB, &l.MaxVolumeStorageMB}
}

// apply sets the given fields on l.
func (j limitsJSON) apply(l *store.Limits) {
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	set64 := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&l.MaxConcurrent, j.MaxConcurrent)
	set(&l.MaxVCPUs, j.MaxVCPUs)
	set64(&l.MaxMemoryMB, j.MaxMemoryMB)
	set64(&l.MaxDiskMB, j.MaxDiskMB)
	set(&l.MaxPaused, j.MaxPaused)
	set(&l.MaxSnapshots, j.MaxSnapshots)
	set(&l.MaxBuilds, j.MaxBuilds)
	set(&l.MaxWebhooks, j.MaxWebhooks)
	set64(&l.MaxTemplateStorageMB, j.MaxTemplateStorageMB)
	set(&l.MaxVolumes, j.MaxVolumes)
	set64(&l.MaxVolumeSizeMB, j.MaxVolumeSizeMB)
	set64(&l.MaxVolumeStorageMB, j.MaxVolumeStorageMB)
	if j.MaxTimeoutSeconds != nil {
		l.MaxTimeout = time.Duration(*j.MaxTimeoutSeconds) * time.Second
	}
}

type adminTeamJSON struct {
	TeamID    string     `json:"teamID"`
	Name      string     `json:"name"`
	CreatedAt string     `json:"createdAt"`
	Limits    limitsJSON `json:"limits"`
	// APIKey is the team's first key, in clear, in the answer to a
	// create only.
	APIKey string `json:"apiKey,omitempty"`
}

func adminTeamOf(t *store.Team) adminTeamJSON {
	return adminTeamJSON{TeamID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano), Limits: limitsOf(t.Limits)}
}

// adminCreateTeam answers POST /admin/teams {id?, name?, limits?} with the
// team and its first API key.
func (s *Server) adminCreateTeam(w http.ResponseWriter, r *http.Request, _ *caller) error {
	var req struct {
		ID     string     `json:"id"`
		Name   string     `json:"name"`
		Limits limitsJSON `json:"limits"`
	}
	if err := decode(r, &req, false); err != nil {
		return err
	}
	var lim store.Limits
	req.Limits.apply(&lim)
	t, key, err := CreateTeam(r.Context(), s.st, req.ID, req.Name, lim)
	if err != nil {
		return err
	}
	s.log.Info("team created", "team_id", t.ID)
	out := adminTeamOf(t)
	out.APIKey = key
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) adminListTeams(w http.ResponseWriter, r *http.Request, _ *caller) error {
	teams, err := s.st.ListTeams(r.Context())
	if err != nil {
		return err
	}
	out := make([]adminTeamJSON, 0, len(teams))
	for _, t := range teams {
		out = append(out, adminTeamOf(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) adminGetTeam(w http.ResponseWriter, r *http.Request, _ *caller) error {
	t, err := s.st.GetTeam(r.Context(), r.PathValue("teamID"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, adminTeamOf(t))
	return nil
}

// adminUpdateTeam answers PATCH /admin/teams/{teamID} {name?, limits?}:
// the fields given change, the others stay.
func (s *Server) adminUpdateTeam(w http.ResponseWriter, r *http.Request, _ *caller) error {
	var req struct {
		Name   *string    `json:"name"`
		Limits limitsJSON `json:"limits"`
	}
	if err := decode(r, &req, true); err != nil {
		return err
	}
	t, err := s.st.UpdateTeam(r.Context(), r.PathValue("teamID"), func(t *store.Team) error {
		if req.Name != nil {
			if *req.Name == "" {
				return invalid("name", "must not be empty")
			}
			t.Name = *req.Name
		}
		req.Limits.apply(&t.Limits)
		return ValidLimits(t.Limits)
	})
	if err != nil {
		return err
	}
	s.log.Info("team updated", "team_id", t.ID)
	writeJSON(w, http.StatusOK, adminTeamOf(t))
	return nil
}

// adminDeleteTeam answers DELETE /admin/teams/{teamID}: 409 while the team
// has sandboxes that are not killed; its templates, keys and webhooks go
// with it. The default team stays.
func (s *Server) adminDeleteTeam(w http.ResponseWriter, r *http.Request, _ *caller) error {
	id := r.PathValue("teamID")
	if id == DefaultTeamID {
		return errdefs.Publicf(errdefs.ErrConflict, "the default team cannot be deleted")
	}
	var cat TemplateDeleter
	if s.cfg.Catalog != nil {
		cat = s.cfg.Catalog
	}
	if err := DeleteTeam(r.Context(), s.st, cat, id); err != nil {
		return err
	}
	s.log.Info("team deleted", "team_id", id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// TemplateDeleter lists and deletes a team's templates (templates.Catalog).
type TemplateDeleter interface {
	DeleteTeamTemplates(ctx context.Context, teamID string) error
}

// DeleteTeam removes a team: ErrConflict while it has live sandboxes,
// then its templates (when cat is set), keys and webhooks.
func DeleteTeam(ctx context.Context, st store.Store, cat TemplateDeleter, id string) error {
	if _, err := st.GetTeam(ctx, id); err != nil {
		return err
	}
	n, err := st.CountSandboxes(ctx, id, store.LiveStates...)
	if err != nil {
		return err
	}
	if n > 0 {
		return errdefs.Publicf(errdefs.ErrConflict, "team %q has %d sandboxes that are not killed (kill them first)", id, n)
	}
	if cat != nil {
		if err := cat.DeleteTeamTemplates(ctx, id); err != nil {
			return fmt.Errorf("team %q: %w", id, err)
		}
	}
	return st.DeleteTeam(ctx, id)
}
