package apiserver

import (
	"net/http"
	"sort"
)

// Warm pools (docs/lifecycle.md §6), admin routes: how many ready sandboxes
// of a template the node keeps for creates to claim.
//
//	PUT /admin/templates/{templateID}/pool {"size": N}   (0 removes it)
//	GET /admin/pools
//
// The template is resolved as the caller's team sees it (X-Team-ID); the
// members get the API's default resources, so creates with default
// resources claim them.

// PoolStatus is one pool in the admin API's answers.
type PoolStatus struct {
	TemplateID string `json:"templateID"`
	BuildID    string `json:"buildID"`
	Size       int    `json:"size"`
	Ready      int    `json:"ready"`
	// Hits and Misses count the creates that asked the pool for a member
	// since it was set (a hit claimed one).
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
}

func (s *Server) poolRoutes(admin func(handlerFunc) http.Handler) {
	if s.cfg.Pools == nil {
		return
	}
	s.handle("PUT /admin/templates/{templateID}/pool", admin(s.setPool))
	s.handle("GET /admin/pools", admin(s.listPools))
}

func (s *Server) setPool(w http.ResponseWriter, r *http.Request, c *caller) error {
	var body struct {
		Size *int `json:"size"`
	}
	if err := decode(r, &body, true); err != nil {
		return err
	}
	if body.Size == nil || *body.Size < 0 || *body.Size > 100 {
		return invalid("size", "required, 0 to 100")
	}
	tmpl, err := s.cfg.Templates.Resolve(r.Context(), c.teamID, r.PathValue("templateID"))
	if err != nil {
		return err
	}
	if err := s.cfg.Pools.SetPool(r.Context(), tmpl, s.sandboxResources(tmpl), *body.Size); err != nil {
		return err
	}
	st := s.cfg.Pools.Pools()[tmpl.ID]
	writeJSON(w, http.StatusOK, PoolStatus{TemplateID: tmpl.ID, BuildID: tmpl.BuildID, Size: *body.Size, Ready: st.Ready, Hits: st.Hits, Misses: st.Misses})
	return nil
}

func (s *Server) listPools(w http.ResponseWriter, r *http.Request, _ *caller) error {
	out := []PoolStatus{}
	for id, st := range s.cfg.Pools.Pools() {
		out = append(out, PoolStatus{TemplateID: id, BuildID: st.BuildID, Size: st.Size, Ready: st.Ready, Hits: st.Hits, Misses: st.Misses})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TemplateID < out[j].TemplateID })
	writeJSON(w, http.StatusOK, out)
	return nil
}
