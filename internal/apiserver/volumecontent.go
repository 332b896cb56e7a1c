package apiserver

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/throttle"
)

// The volume content API (E2B's /volumecontent/{volumeID}/...): a
// volume's files without a sandbox, authenticated by the volume's token
// ("Authorization: Bearer <token>", which the SDK takes from
// Volume.create or getInfo), served by the volume's node with the same
// path rules as everywhere (nodeapi.VolumeService: resolved inside the
// volume). A token opens its own volume only; a wrong one (or a volume
// that does not exist) is 401, and failures count against the address's
// API key budget (auththrottle.go). Files stream both ways.

// volumeEntryJSON is E2B's VolumeEntryStat.
type volumeEntryJSON struct {
	Name   string    `json:"name"`
	Path   string    `json:"path"`
	Type   string    `json:"type"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

func entryJSON(e *nodeapi.VolumeEntry) volumeEntryJSON {
	return volumeEntryJSON{Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, Mode: e.Mode, UID: e.UID, GID: e.GID,
		Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime, Target: e.Target}
}

// contentCall is an authenticated content call: the volume and its
// node's service.
type contentCall struct {
	v  *store.Volume
	vs nodeapi.VolumeService
}

func (s *Server) volumeContentRoutes() {
	h := func(fn func(w http.ResponseWriter, r *http.Request, c contentCall) error) http.Handler {
		return errhttp.Handler(func(w http.ResponseWriter, r *http.Request) error {
			c, err := s.contentAuth(r)
			if err != nil {
				return err
			}
			return fn(w, r, c)
		}, s.onError)
	}
	s.handle("GET /volumecontent/{volumeID}/dir", h(s.listVolumeDir))
	s.handle("POST /volumecontent/{volumeID}/dir", h(s.makeVolumeDir))
	s.handle("GET /volumecontent/{volumeID}/path", h(s.statVolumePath))
	s.handle("PATCH /volumecontent/{volumeID}/path", h(s.setVolumeMetadata))
	s.handle("DELETE /volumecontent/{volumeID}/path", h(s.removeVolumePath))
	s.handle("GET /volumecontent/{volumeID}/file", h(s.readVolumeFile))
	s.handle("PUT /volumecontent/{volumeID}/file", h(s.writeVolumeFile))
}

// contentAuth checks the request's volume token against its volume.
func (s *Server) contentAuth(r *http.Request) (contentCall, error) {
	client := throttle.Client(r, s.cfg.TrustedProxies)
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return contentCall{}, errdefs.Publicf(errdefs.ErrUnauthorized, "missing volume token: set Authorization: Bearer <token>")
	}
	if s.cfg.Volumes == nil {
		return contentCall{}, errNoVolumes
	}
	if err := s.auths.allow(client, credKey); err != nil {
		return contentCall{}, err
	}
	v, vs, err := s.cfg.Volumes.Content(r.Context(), r.PathValue("volumeID"), tok)
	if errors.Is(err, errdefs.ErrUnauthorized) {
		s.auths.failed(client, credKey)
	}
	if err != nil {
		return contentCall{}, err
	}
	return contentCall{v: v, vs: vs}, nil
}

// pathParam is the request's path query parameter ("" is the root).
func pathParam(r *http.Request, required bool) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" && required {
		return "", invalid("path", "required")
	}
	return p, nil
}

// uintParam parses an optional unsigned query parameter (decimal, or
// 0o/0x/0-prefixed: a mode may be given in octal).
func uintParam(r *http.Request, name string) (*uint32, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(v, 0, 32)
	if err != nil {
		return nil, invalid(name, "want a non-negative integer, got %q", v)
	}
	u := uint32(n)
	return &u, nil
}

// fileOptions reads uid, gid, mode and force.
func fileOptions(r *http.Request) (nodeapi.VolumeFileOptions, error) {
	var o nodeapi.VolumeFileOptions
	var err error
	if o.UID, err = uintParam(r, "uid"); err != nil {
		return o, err
	}
	if o.GID, err = uintParam(r, "gid"); err != nil {
		return o, err
	}
	if o.Mode, err = uintParam(r, "mode"); err != nil {
		return o, err
	}
	if f := r.URL.Query().Get("force"); f != "" {
		if o.Force, err = strconv.ParseBool(f); err != nil {
			return o, invalid("force", "want true or false, got %q", f)
		}
	}
	return o, nil
}

func (s *Server) listVolumeDir(w http.ResponseWriter, r *http.Request, c contentCall) error {
	p, _ := pathParam(r, false)
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 {
			return invalid("depth", "want a positive integer, got %q", d)
		}
		depth = n
	}
	es, err := c.vs.ListVolumeDir(r.Context(), c.v.TeamID, c.v.ID, p, depth)
	if err != nil {
		return err
	}
	out := make([]volumeEntryJSON, 0, len(es))
	for i := range es {
		out = append(out, entryJSON(&es[i]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) makeVolumeDir(w http.ResponseWriter, r *http.Request, c contentCall) error {
	p, err := pathParam(r, true)
	if err != nil {
		return err
	}
	o, err := fileOptions(r)
	if err != nil {
		return err
	}
	e, err := c.vs.MakeVolumeDir(r.Context(), c.v.TeamID, c.v.ID, p, o)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, entryJSON(e))
	return nil
}

func (s *Server) statVolumePath(w http.ResponseWriter, r *http.Request, c contentCall) error {
	p, _ := pathParam(r, false)
	e, err := c.vs.StatVolumePath(r.Context(), c.v.TeamID, c.v.ID, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
	return nil
}

// setVolumeMetadata answers PATCH .../path?path= {uid?, gid?, mode?}.
func (s *Server) setVolumeMetadata(w http.ResponseWriter, r *http.Request, c contentCall) error {
	p, err := pathParam(r, true)
	if err != nil {
		return err
	}
	var md struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	if err := decode(r, &md, false); err != nil {
		return err
	}
	e, err := c.vs.SetVolumeMetadata(r.Context(), c.v.TeamID, c.v.ID, p, nodeapi.VolumeMetadata{UID: md.UID, GID: md.GID, Mode: md.Mode})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
	return nil
}

func (s *Server) removeVolumePath(w http.ResponseWriter, r *http.Request, c contentCall) error {
	p, err := pathParam(r, true)
	if err != nil {
		return err
	}
	if err := c.vs.RemoveVolumePath(r.Context(), c.v.TeamID, c.v.ID, p); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// readVolumeFile streams a file (chunked: another sandbox may be writing
// it while it is read).
func (s *Server) readVolumeFile(w http.ResponseWriter, r *http.Request, c contentCall) error {
	p, err := pathParam(r, true)
	if err != nil {
		return err
	}
	rc, _, err := c.vs.ReadVolumeFile(r.Context(), c.v.TeamID, c.v.ID, p)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		// The status is sent: the client sees a cut body.
		s.log.Debug("volume file read cut", "volume_id", c.v.ID, "error", err)
	}
	return nil
}

// writeVolumeFile takes the body as the file's content, streamed to the
// volume's node; the answer comes once the file is on disk.
func (s *Server) writeVolumeFile(w http.ResponseWriter, r *http.Request, c contentCall) error {
	p, err := pathParam(r, true)
	if err != nil {
		return err
	}
	o, err := fileOptions(r)
	if err != nil {
		return err
	}
	e, err := c.vs.WriteVolumeFile(r.Context(), c.v.TeamID, c.v.ID, p, o, r.Body)
	if errdefs.IsExhausted(err) {
		// 413: the write's own size is what does not fit (ENOSPC is what
		// a sandbox sees).
		return &errhttp.HTTPError{Code: http.StatusRequestEntityTooLarge, Err: err,
			Msg: fmt.Sprintf("volume %q is full (%d MiB): the file does not fit", c.v.Name, c.v.SizeMB)}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, entryJSON(e))
	return nil
}
