package files

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/envd/filesystem"
	"github.com/warren-sandbox/warren/internal/envd/identity"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Metadata limits: a key fits the VFS xattr name limit once prefixed, and
// all of a file's metadata fits one inode's xattr budget.
const (
	maxMetadataKey   = 255 - len(filesystem.MetadataPrefix)
	maxMetadataTotal = 4096
	metadataHeader   = "X-Metadata-"
)

// uploaded is one element of the upload answer.
type uploaded struct {
	Name     string            `json:"name"`
	Path     string            `json:"path"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	u, grant, ok := h.begin(w, r, auth.OpWrite)
	if !ok {
		return
	}
	if grant.Signed && grant.Path == "" {
		auth.WriteError(w, http.StatusForbidden, msgSignedNoPath)
		return
	}
	md, err := metadataFromHeaders(r.Header)
	if err != nil {
		auth.WriteError(w, http.StatusBadRequest, errdefs.MessageOrText(err))
		return
	}
	body := io.Reader(r.Body)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			auth.WriteError(w, http.StatusBadRequest, "invalid gzip body")
			return
		}
		defer gz.Close()
		body = gz
	default:
		auth.WriteError(w, http.StatusBadRequest, fmt.Sprintf("unsupported Content-Encoding: %s, supported: gzip", enc))
		return
	}
	queryPath := r.URL.Query().Get("path")
	var result []uploaded
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case mt == "multipart/form-data" && grant.Signed:
		result, err = uploadSigned(u, body, params["boundary"], u.ResolvePath(queryPath, ""), md)
	case mt == "multipart/form-data":
		result, err = h.uploadMultipart(u, body, params["boundary"], queryPath, md)
	default:
		if queryPath == "" {
			auth.WriteError(w, http.StatusBadRequest, "path is required for a raw upload")
			return
		}
		var e uploaded
		e, err = writeFile(u, u.ResolvePath(queryPath, ""), body, md)
		result = []uploaded{e}
	}
	if err != nil {
		h.log.Debug("upload failed", "error", err)
		httpError(w, err, errdefs.MessageOrText(err))
		return
	}
	if len(result) == 0 {
		auth.WriteError(w, http.StatusBadRequest, "no file in the request")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(result)
}

func (h *Handler) uploadMultipart(u *identity.User, body io.Reader, boundary, queryPath string, md map[string]string) ([]uploaded, error) {
	if boundary == "" {
		return nil, errdefs.Classf(errdefs.ErrInvalid, "multipart body without boundary")
	}
	mr := multipart.NewReader(body, boundary)
	var out []uploaded
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, errdefs.Classf(errdefs.ErrInvalid, "multipart body: %v", err)
		}
		name := rawFilename(part.Header.Get("Content-Disposition"))
		if name == "" && part.FormName() != "file" {
			_ = part.Close()
			continue
		}
		target := name
		if queryPath != "" && len(out) == 0 {
			target = queryPath
		}
		if target == "" {
			return nil, errdefs.Classf(errdefs.ErrInvalid, "part without a file name and no path given")
		}
		e, err := writeFile(u, u.ResolvePath(target, ""), part, md)
		_ = part.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
}

// rawFilename returns the filename parameter of a Content-Disposition
// header as sent (mime/multipart's FileName keeps only the base name).
func rawFilename(cd string) string {
	_, params, err := mime.ParseMediaType(cd)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// writeFile streams r into path for u, as root on u's behalf (as E2B's
// envd does: any path may be written): missing parents are created and
// given to u, an existing file is truncated, a new one belongs to u.
func writeFile(u *identity.User, path string, r io.Reader, md map[string]string) (uploaded, error) {
	e := uploaded{Name: filepath.Base(path), Path: path, Type: "file"}
	f, err := u.CreateFile(path)
	if err != nil {
		return e, err
	}
	buf := make([]byte, 256<<10)
	if _, err := io.CopyBuffer(onlyWriter{f}, onlyReader{r}, buf); err != nil {
		_ = f.Close()
		return e, fmt.Errorf("write '%s': %w", path, err)
	}
	if err := f.Close(); err != nil {
		return e, fmt.Errorf("write '%s': %w", path, err)
	}
	if err := filesystem.WriteMetadata(path, md); err != nil {
		return e, err
	}
	if len(md) > 0 {
		e.Metadata = md
	}
	return e, nil
}

// onlyReader and onlyWriter hide ReaderFrom/WriterTo so that CopyBuffer
// uses the fixed buffer (bounded memory) whatever the concrete types.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

// metadataFromHeaders collects X-Metadata-<key> headers (first value wins)
// and validates them.
func metadataFromHeaders(h http.Header) (map[string]string, error) {
	md := map[string]string{}
	total := 0
	for name, values := range h {
		if len(name) <= len(metadataHeader) || !strings.EqualFold(name[:len(metadataHeader)], metadataHeader) || len(values) == 0 {
			continue
		}
		key := strings.ToLower(name[len(metadataHeader):])
		val := values[0]
		if !printable(key) || !printable(val) {
			return nil, fmt.Errorf("metadata %q: keys and values must be printable ASCII", key)
		}
		if len(key) > maxMetadataKey {
			return nil, fmt.Errorf("metadata key %q is longer than %d bytes", key, maxMetadataKey)
		}
		total += len(filesystem.MetadataPrefix) + len(key) + len(val)
		md[key] = val
	}
	if total > maxMetadataTotal {
		return nil, fmt.Errorf("metadata is larger than %d bytes", maxMetadataTotal)
	}
	return md, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
