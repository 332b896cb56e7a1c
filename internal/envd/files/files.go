// Package files implements envd's /files HTTP route: GET downloads a file,
// POST uploads one or more (multipart, one part per file, or a raw
// octet-stream body, optionally gzip-encoded). Bodies are streamed to and
// from disk, never held in memory. Callers authenticate with the access
// token or a signed URL (see package auth); the user comes from the
// "username" query parameter, else the sandbox's default user.
package files

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/envd/identity"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"golang.org/x/sys/unix"
)

// Handler serves /files.
type Handler struct {
	log  *slog.Logger
	auth *auth.Auth
}

var _ http.Handler = (*Handler)(nil)

// New returns the /files handler.
func New(log *slog.Logger, a *auth.Auth) *Handler { return &Handler{log: log, auth: a} }

// ServeHTTP dispatches on the method.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.download(w, r)
	case http.MethodPost:
		h.upload(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		auth.WriteError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

// begin authorises the request for op and resolves its user.
func (h *Handler) begin(w http.ResponseWriter, r *http.Request, op string) (*identity.User, auth.Grant, bool) {
	g, msg := h.auth.Files(r, op)
	if msg != "" {
		auth.WriteError(w, http.StatusUnauthorized, msg)
		return nil, g, false
	}
	u, err := h.auth.User(r.URL.Query().Get("username"))
	if err != nil {
		auth.WriteError(w, http.StatusUnauthorized, fmt.Sprintf("invalid user: '%s'", r.URL.Query().Get("username")))
		return nil, g, false
	}
	return u, g, true
}

// httpError answers with the status of err's class.
func httpError(w http.ResponseWriter, err error, msg string) {
	status := errhttp.Status(err)
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		status = http.StatusInsufficientStorage
		msg = "not enough disk space: " + msg
	}
	auth.WriteError(w, status, msg)
}

// classify wraps an OS error in its class.
func classify(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.Classf(errdefs.ErrNotFound, "%w", err)
	case errors.Is(err, fs.ErrPermission):
		return errdefs.Classf(errdefs.ErrForbidden, "%w", err)
	default:
		return err
	}
}

// acceptsGzip reports whether the client accepts a gzip response and
// whether it accepts any encoding we can produce (identity or gzip).
func acceptsGzip(header string) (gzipOK, acceptable bool) {
	if strings.TrimSpace(header) == "" {
		return false, true
	}
	identity, star := -1.0, -1.0
	gz := -1.0
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if _, err := fmt.Sscanf(v, "%g", &q); err != nil {
				q = 1
			}
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "gzip":
			gz = q
		case "identity":
			identity = q
		case "*":
			star = q
		}
	}
	if gz < 0 {
		gz = star
	}
	identityOK := identity != 0 && !(identity < 0 && star == 0)
	return gz > 0, gz > 0 || identityOK
}
