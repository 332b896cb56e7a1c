package nodereg

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
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
//
// Their errors are answered through errhttp's table, with the API's body.
func (c *Credentials) AdminRoutes(handle func(pattern string, h http.Handler)) {
	serve := func(h errhttp.ReturnHandlerFunc) http.Handler {
		return errhttp.Handler(h, errhttp.Log(c.log, "node tokens admin"))
	}
	handle("POST /admin/nodes/{nodeID}/tokens", serve(c.issue))
	handle("GET /admin/nodes/{nodeID}/tokens", serve(c.list))
	handle("DELETE /admin/nodes/{nodeID}/tokens/{tokenID}", serve(c.revoke))
}

func (c *Credentials) issue(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		return errdefs.Publicf(errdefs.ErrInvalid, "invalid body: %s", bodyError(err))
	}
	tok, rec, err := c.Issue(r.Context(), r.PathValue("nodeID"), body.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, IssuedToken{TokenInfo: tokenInfo(rec), Token: tok})
	return nil
}

func (c *Credentials) list(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("nodeID")
	if err := ValidID(id); err != nil {
		return err
	}
	recs, err := c.Tokens(r.Context(), id)
	if err != nil {
		return err
	}
	out := []TokenInfo{}
	for _, t := range recs {
		out = append(out, tokenInfo(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (c *Credentials) revoke(w http.ResponseWriter, r *http.Request) error {
	rec, err := c.Revoke(r.Context(), r.PathValue("nodeID"), r.PathValue("tokenID"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, tokenInfo(rec))
	return nil
}
