package files

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path/filepath"

	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/envd/identity"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"golang.org/x/sys/unix"
)

func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	u, _, ok := h.begin(w, r, auth.OpRead)
	if !ok {
		return
	}
	raw := r.URL.Query().Get("path")
	if raw == "" {
		auth.WriteError(w, http.StatusBadRequest, "path is required")
		return
	}
	path := u.ResolvePath(raw, "")
	f, err := u.Open(path, unix.O_RDONLY, identity.Read)
	if err != nil {
		switch {
		case errdefs.IsNotFound(err):
			auth.WriteError(w, http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", path))
		case errors.Is(err, errdefs.ErrForbidden):
			httpError(w, err, fmt.Sprintf("user '%s' may not read '%s'", u.Name, path))
		default:
			httpError(w, err, fmt.Sprintf("cannot open '%s'", path))
		}
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		httpError(w, classify(err), fmt.Sprintf("cannot stat '%s'", path))
		return
	}
	if st.IsDir() {
		auth.WriteError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is a directory", path))
		return
	}
	if !st.Mode().IsRegular() {
		auth.WriteError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is not a regular file", path))
		return
	}
	useGzip, acceptable := acceptsGzip(r.Header.Get("Accept-Encoding"))
	conditional := r.Header.Get("Range") != "" || r.Header.Get("If-Modified-Since") != "" ||
		r.Header.Get("If-None-Match") != "" || r.Header.Get("If-Range") != ""
	if !acceptable {
		auth.WriteError(w, http.StatusNotAcceptable, "no acceptable content encoding; supported: gzip, identity")
		return
	}
	if conditional {
		useGzip = false
	}
	w.Header().Set("Vary", "Accept-Encoding")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(path)}))
	if !useGzip {
		http.ServeContent(w, r, path, st.ModTime(), f)
		return
	}
	ct := mime.TypeByExtension(filepath.Ext(path))
	if ct == "" {
		ct = "application/octet-stream"
	}
	// The first read comes before the headers: a file that cannot be read
	// is an error answer, never an empty gzip stream that decodes as an
	// empty file.
	first := make([]byte, 32<<10)
	n, err := f.Read(first)
	if err != nil && !errors.Is(err, io.EOF) {
		h.log.Warn("download: read failed", "path", path, "error", err)
		httpError(w, classify(err), fmt.Sprintf("cannot read '%s'", path))
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Encoding", "gzip")
	if r.Method == http.MethodHead {
		return
	}
	gw := gzip.NewWriter(w)
	_, err = gw.Write(first[:n])
	if err == nil {
		_, err = io.Copy(gw, f)
	}
	if err != nil {
		// Headers are out: end the connection without the gzip trailer,
		// so that the client sees a cut stream, not a shorter file.
		h.log.Warn("download aborted", "path", path, "error", err)
		panic(http.ErrAbortHandler)
	}
	_ = gw.Close()
}
