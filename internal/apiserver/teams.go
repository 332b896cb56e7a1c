package apiserver

import (
	"net/http"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

type teamJSON struct {
	TeamID    string `json:"teamID"`
	Name      string `json:"name"`
	APIKey    string `json:"apiKey"`
	IsDefault bool   `json:"isDefault"`
}

// listTeams answers GET /teams with the caller's team (the CLI's
// auth configure reads it). Keys are stored hashed, so apiKey is the
// masked form.
func (s *Server) listTeams(w http.ResponseWriter, r *http.Request, c *caller) error {
	var teams []*store.Team
	if c.team != nil {
		teams = []*store.Team{c.team}
	} else {
		var err error
		if teams, err = s.st.ListTeams(r.Context()); err != nil {
			return err
		}
	}
	out := make([]teamJSON, 0, len(teams))
	for i, t := range teams {
		mask := ""
		if keys, err := s.st.ListAPIKeys(r.Context(), t.ID); err == nil && len(keys) > 0 {
			mask = keys[0].Mask
		}
		out = append(out, teamJSON{TeamID: t.ID, Name: t.Name, APIKey: mask, IsDefault: i == 0})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// adminKillTeam kills every live sandbox of a team.
func (s *Server) adminKillTeam(w http.ResponseWriter, r *http.Request, _ *caller) error {
	teamID := r.PathValue("teamID")
	sbs, err := s.st.ListSandboxes(r.Context(), store.SandboxFilter{TeamID: teamID})
	if err != nil {
		return err
	}
	var killed, failed int
	for _, sb := range sbs {
		if err := s.lc.Kill(r.Context(), teamID, sb.ID, sandbox.KillAdmin); err != nil {
			failed++
			s.log.Warn("admin kill", "sandbox_id", sb.ID, "error", err)
			continue
		}
		killed++
	}
	writeJSON(w, http.StatusOK, map[string]int{"killedCount": killed, "failedCount": failed})
	return nil
}

// adminRunningCounts answers the number of running sandboxes per team.
func (s *Server) adminRunningCounts(w http.ResponseWriter, r *http.Request, _ *caller) error {
	sbs, err := s.st.ListSandboxes(r.Context(), store.SandboxFilter{States: []sandbox.State{sandbox.StateRunning}})
	if err != nil {
		return err
	}
	// The spec's AdminTeamRunningSandboxCounts: {teamID: count}, teams
	// without running sandboxes left out.
	counts := map[string]int{}
	for _, sb := range sbs {
		counts[sb.TeamID]++
	}
	writeJSON(w, http.StatusOK, counts)
	return nil
}

// adminCreateKey issues a key for a team; the clear key is in the answer
// only.
func (s *Server) adminCreateKey(w http.ResponseWriter, r *http.Request, _ *caller) error {
	teamID := r.PathValue("teamID")
	var req struct {
		Name string `json:"name"`
	}
	if err := decode(r, &req, false); err != nil {
		return err
	}
	if _, err := s.st.GetTeam(r.Context(), teamID); err != nil {
		return err
	}
	key, k, err := AddKey(r.Context(), s.st, teamID, req.Name, "")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{
		"id": k.ID, "name": k.Name, "key": key, "mask": maskDetails(key),
		"createdAt": k.CreatedAt.Format(time.RFC3339Nano),
	})
	return nil
}

func (s *Server) adminDeleteKey(w http.ResponseWriter, r *http.Request, _ *caller) error {
	keys, err := s.st.ListAPIKeys(r.Context(), r.PathValue("teamID"))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.ID == r.PathValue("apiKeyID") {
			if err := s.st.DeleteAPIKey(r.Context(), k.ID); err != nil {
				return err
			}
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
	}
	return errdefs.Publicf(errdefs.ErrNotFound, "api key not found")
}

// identifierMask is the spec's IdentifierMaskingDetails of a key: its
// prefix, the length of the rest, and the rest's first two and last four
// characters.
type identifierMask struct {
	Prefix            string `json:"prefix"`
	ValueLength       int    `json:"valueLength"`
	MaskedValuePrefix string `json:"maskedValuePrefix"`
	MaskedValueSuffix string `json:"maskedValueSuffix"`
}

func maskDetails(key string) identifierMask {
	v := strings.TrimPrefix(key, KeyPrefix)
	m := identifierMask{Prefix: KeyPrefix, ValueLength: len(v)}
	if len(v) >= 6 {
		m.MaskedValuePrefix, m.MaskedValueSuffix = v[:2], v[len(v)-4:]
	}
	return m
}
