package nodereg

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/store"
)

// TokenInfo is one node token in the admin routes (no secret).
type TokenInfo struct {
	ID         string     `json:"id"`
	NodeID     string     `json:"nodeID"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"createdAt"`
	RevokedAt  *time.Time `json:"revokedAt,omitempty"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
}

// IssuedToken is a token as it is issued: the only time it is shown.
type IssuedToken struct {
	TokenInfo
	Token string `json:"token"`
}

func tokenInfo(t *store.NodeToken) TokenInfo {
	out := TokenInfo{ID: t.ID, NodeID: t.NodeID, Name: t.Name, CreatedAt: t.CreatedAt}
	if !t.RevokedAt.IsZero() {
		out.RevokedAt = &t.RevokedAt
	}
	if !t.LastUsedAt.IsZero() {
		out.LastUsedAt = &t.LastUsedAt
	}
	return out
}

// AdminRoutes adds the node token routes through handle, which must
// authenticate the admin (apiserver.Server.HandleAdmin):
//
//	POST   /admin/nodes/{nodeID}/tokens             {name?} → IssuedToken
//	GET    /admin/nodes/{nodeID}/tokens             → []TokenInfo
//	DELETE /admin/nodes/{nodeID}/tokens/{tokenID}   → TokenInfo (revoked)
func (c *Credentials) AdminRoutes(handle func(pattern string, h http.Handler)) {
	handle("POST /admin/nodes/{nodeID}/tokens", http.HandlerFunc(c.issue))
	handle("GET /admin/nodes/{nodeID}/tokens", http.HandlerFunc(c.list))
	handle("DELETE /admin/nodes/{nodeID}/tokens/{tokenID}", http.HandlerFunc(c.revoke))
}

func (c *Credentials) issue(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "invalid body: "+bodyError(err))
		return
	}
	tok, rec, err := c.Issue(r.Context(), r.PathValue("nodeID"), body.Name)
	if err != nil {
		c.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, IssuedToken{TokenInfo: tokenInfo(rec), Token: tok})
}

func (c *Credentials) list(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("nodeID")
	if err := ValidID(id); err != nil {
		c.fail(w, err)
		return
	}
	recs, err := c.Tokens(r.Context(), id)
	if err != nil {
		c.fail(w, err)
		return
	}
	out := []TokenInfo{}
	for _, t := range recs {
		out = append(out, tokenInfo(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (c *Credentials) revoke(w http.ResponseWriter, r *http.Request) {
	rec, err := c.Revoke(r.Context(), r.PathValue("nodeID"), r.PathValue("tokenID"))
	if err != nil {
		c.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, tokenInfo(rec))
}

func (c *Credentials) fail(w http.ResponseWriter, err error) {
	switch {
	case errdefs.IsNotFound(err):
		writeError(w, http.StatusNotFound, errdefs.ClientMessage(err))
	case errdefs.IsInvalid(err):
		writeError(w, http.StatusBadRequest, errdefs.ClientMessage(err))
	case errdefs.IsUnsupported(err):
		writeError(w, http.StatusNotImplemented, errdefs.ClientMessage(err))
	default:
		c.log.Error("node tokens admin", "error", err)
		writeError(w, http.StatusInternalServerError, "internal error")
	}
}
