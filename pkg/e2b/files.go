package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/warren-sandbox/warren/api/envd/filesystem"
)

// Files reads and changes the sandbox's filesystem. Relative paths are
// relative to the user's home.
type Files struct{ e *envd }

// FileOptions are per call.
type FileOptions struct {
	// User acts as this user (the sandbox's default when empty).
	User string
	// Metadata, on writes, is stored with each file (user xattrs, envd
	// 0.6.2 or newer), replacing what it had; Stat and List return it.
	Metadata map[string]string
	// Gzip compresses the transfer: a read asks envd for a gzip-encoded
	// body, a write sends one (envd 0.5.7 or newer; older ones get the
	// plain multipart upload).
	Gzip bool
}

// FileType is the kind of a filesystem entry.
type FileType string

// The kinds of entries.
const (
	TypeFile    FileType = "file"
	TypeDir     FileType = "dir"
	TypeSymlink FileType = "symlink"
)

// EntryInfo describes a file, directory or symlink.
type EntryInfo struct {
	Name          string
	Type          FileType
	Path          string
	Size          int64
	Mode          os.FileMode
	Permissions   string
	Owner, Group  string
	ModifiedTime  time.Time
	SymlinkTarget string
	Metadata      map[string]string
}

func entryOf(e *fspb.EntryInfo) EntryInfo {
	out := EntryInfo{Name: e.GetName(), Type: typeOf(e.GetType()), Path: e.GetPath(), Size: e.GetSize(),
		Mode: os.FileMode(e.GetMode()), Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(),
		SymlinkTarget: e.GetSymlinkTarget(), Metadata: e.GetMetadata()}
	if t := e.GetModifiedTime(); t != nil {
		out.ModifiedTime = t.AsTime()
	}
	return out
}

func typeOf(t fspb.FileType) FileType {
	switch t {
	case fspb.FileType_FILE_TYPE_FILE:
		return TypeFile
	case fspb.FileType_FILE_TYPE_DIRECTORY:
		return TypeDir
	case fspb.FileType_FILE_TYPE_SYMLINK:
		return TypeSymlink
	}
	return ""
}

// WriteInfo is what envd reports about a written file.
type WriteInfo struct {
	Name     string            `json:"name"`
	Path     string            `json:"path"`
	Type     FileType          `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// filesURL is the /files URL of path (empty for a multi-file write).
func (e *envd) filesURL(base, path, user string, extra url.Values) string {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if user = e.user(user); user != "" {
		q.Set("username", user)
	}
	for k, v := range extra {
		q[k] = v
	}
	return base + "/files?" + q.Encode()
}

// Read returns the content of the file at path.
func (f *Files) Read(ctx context.Context, path string, o FileOptions) ([]byte, error) {
	ctx, cancel := f.e.unary(ctx)
	defer cancel()
	rc, err := f.ReadStream(ctx, path, o)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, err // named by namedBody
	}
	return data, nil
}

// ReadStream returns the content of the file at path as it arrives;
// ctx bounds the whole transfer. The caller closes it. A body that ends
// before its announced length or its gzip trailer fails the read with
// io.ErrUnexpectedEOF rather than ending as a short file.
func (f *Files) ReadStream(ctx context.Context, path string, o FileOptions) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.e.filesURL(f.e.base, path, o.User, nil), nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	f.e.auth(req.Header, "")
	req.Header.Set("Accept-Encoding", acceptEncoding(o.Gzip))
	resp, err := f.e.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, fmt.Errorf("read %s: %w", path, httpErr(resp))
	}
	body, err := fileBody(resp)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return namedBody{ReadCloser: body, path: path}, nil
}

// namedBody names the file in the errors of reading it.
type namedBody struct {
	io.ReadCloser
	path string
}

func (b namedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("read %s: %w", b.path, err)
	}
	return n, err
}

// Write writes data to the file at path, creating its parents and
// replacing what was there.
func (f *Files) Write(ctx context.Context, path string, data []byte, o FileOptions) (*WriteInfo, error) {
	infos, err := f.WriteMany(ctx, []WriteEntry{{Path: path, Data: data}}, o)
	if err != nil {
		return nil, err
	}
	return &infos[0], nil
}

// WriteEntry is one file of WriteMany.
type WriteEntry struct {
	Path string
	Data []byte
}

// WriteMany writes several files in one multipart request; with
// o.Gzip (and an envd of 0.5.7 or newer), one gzip'd request per file.
func (f *Files) WriteMany(ctx context.Context, files []WriteEntry, o FileOptions) ([]WriteInfo, error) {
	if len(files) == 0 {
		return nil, nil
	}
	if err := f.e.checkWrite(o); err != nil {
		return nil, fmt.Errorf("write %s: %w", describe(files), err)
	}
	if o.Gzip && f.e.supports(envdOctetStream) {
		var infos []WriteInfo
		for _, file := range files {
			info, err := f.writeGzip(ctx, file, o)
			if err != nil {
				return nil, err
			}
			infos = append(infos, *info)
		}
		return infos, nil
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, file := range files {
		part, err := mw.CreateFormFile("file", file.Path)
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", file.Path, err)
		}
		part.Write(file.Data) // a bytes.Buffer does not fail
	}
	mw.Close()
	path := ""
	if len(files) == 1 {
		path = files[0].Path
	}
	ctx, cancel := f.e.unary(ctx)
	defer cancel()
	infos, err := f.e.upload(ctx, path, o, &body, mw.FormDataContentType(), false)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", describe(files), err)
	}
	if len(infos) < len(files) {
		return nil, fmt.Errorf("write %s: envd reported %d of %d files", describe(files), len(infos), len(files))
	}
	return infos, nil
}

// writeGzip uploads one file as a gzip'd octet-stream body.
func (f *Files) writeGzip(ctx context.Context, file WriteEntry, o FileOptions) (*WriteInfo, error) {
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	zw.Write(file.Data) // a bytes.Buffer does not fail
	zw.Close()
	ctx, cancel := f.e.unary(ctx)
	defer cancel()
	infos, err := f.e.upload(ctx, file.Path, o, &body, "application/octet-stream", true)
	if err == nil && len(infos) == 0 {
		err = errors.New("envd reported no file")
	}
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", file.Path, err)
	}
	return &infos[0], nil
}

// checkWrite refuses metadata that envd cannot store.
func (e *envd) checkWrite(o FileOptions) error {
	if len(o.Metadata) > 0 {
		return e.require(envdFileMetadata, "file metadata")
	}
	return nil
}

func describe(files []WriteEntry) string {
	if len(files) == 1 {
		return files[0].Path
	}
	return fmt.Sprintf("%d files", len(files))
}

// WriteStream writes what r yields to the file at path as it comes, gzip'd
// on the way with o.Gzip; ctx bounds the whole transfer. It is one raw
// upload on envd 0.5.7 or newer, a streamed multipart one before.
func (f *Files) WriteStream(ctx context.Context, path string, r io.Reader, o FileOptions) (*WriteInfo, error) {
	if err := f.e.checkWrite(o); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	contentType, gz := "application/octet-stream", o.Gzip
	body := r
	if !f.e.supports(envdOctetStream) {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		contentType, gz, body = mw.FormDataContentType(), false, pr
		go func() {
			part, err := mw.CreateFormFile("file", path)
			if err == nil {
				_, err = io.Copy(part, r)
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
	} else if gz {
		pr, pw := io.Pipe()
		body = pr
		go func() {
			zw := gzip.NewWriter(pw)
			_, err := io.Copy(zw, r)
			if err == nil {
				err = zw.Close()
			}
			pw.CloseWithError(err)
		}()
	}
	infos, err := f.e.upload(ctx, path, o, body, contentType, gz)
	if pr, ok := body.(*io.PipeReader); ok {
		pr.CloseWithError(errors.New("upload ended")) // ends the copying goroutine
	}
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("write %s: envd reported no file", path)
	}
	return &infos[0], nil
}

// upload POSTs body to /files; gz says it is gzip-encoded.
func (e *envd) upload(ctx context.Context, path string, o FileOptions, body io.Reader, contentType string, gz bool) ([]WriteInfo, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.filesURL(e.base, path, o.User, nil), body)
	if err != nil {
		return nil, err
	}
	e.auth(req.Header, "")
	for k, v := range o.Metadata {
		req.Header.Set("X-Metadata-"+k, v)
	}
	req.Header.Set("Content-Type", contentType)
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, httpErr(resp)
	}
	var infos []WriteInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&infos); err != nil {
		return nil, fmt.Errorf("decode envd answer: %w", err)
	}
	return infos, nil
}

// ListDirOptions describe Files.List.
type ListDirOptions struct {
	FileOptions
	// Depth is how many levels to list (1 when zero).
	Depth uint32
}

// List returns the entries of the directory at path.
func (f *Files) List(ctx context.Context, path string, o ListDirOptions) ([]EntryInfo, error) {
	ctx, cancel := f.e.unary(ctx)
	defer cancel()
	resp, err := f.e.fs.ListDir(ctx, rpc(f.e, &fspb.ListDirRequest{Path: path, Depth: max(o.Depth, 1)}, o.User))
	if err != nil {
		return nil, rpcErr(err, "list %s", path)
	}
	var out []EntryInfo
	for _, e := range resp.Msg.GetEntries() {
		if e.GetType() != fspb.FileType_FILE_TYPE_UNSPECIFIED {
			out = append(out, entryOf(e))
		}
	}
	return out, nil
}

// Stat describes the entry at path (errors.Is(err, ErrNotFound) when
// there is none).
func (f *Files) Stat(ctx context.Context, path string, o FileOptions) (*EntryInfo, error) {
	ctx, cancel := f.e.unary(ctx)
	defer cancel()
	resp, err := f.e.fs.Stat(ctx, rpc(f.e, &fspb.StatRequest{Path: path}, o.User))
	if err != nil {
		return nil, rpcErr(err, "stat %s", path)
	}
	e := entryOf(resp.Msg.GetEntry())
	return &e, nil
}

// Exists reports whether there is an entry at path.
func (f *Files) Exists(ctx context.Context, path string, o FileOptions) (bool, error) {
	_, err := f.Stat(ctx, path, o)
	if IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// MakeDir creates the directory path and its parents; false when it
// already existed.
func (f *Files) MakeDir(ctx context.Context, path string, o FileOptions) (bool, error) {
	ctx, cancel := f.e.unary(ctx)
	defer cancel()
	_, err := f.e.fs.MakeDir(ctx, rpc(f.e, &fspb.MakeDirRequest{Path: path}, o.User))
	if connect.CodeOf(err) == connect.CodeAlreadyExists {
		return false, nil
	}
	if err != nil {
		return false, rpcErr(err, "make directory %s", path)
	}
	return true, nil
}

// Rename moves the entry at from to to.
func (f *Files) Rename(ctx context.Context, from, to string, o FileOptions) (*EntryInfo, error) {
	ctx, cancel := f.e.unary(ctx)
	defer cancel()
	resp, err := f.e.fs.Move(ctx, rpc(f.e, &fspb.MoveRequest{Source: from, Destination: to}, o.User))
	if err != nil {
		return nil, rpcErr(err, "rename %s to %s", from, to)
	}
	e := entryOf(resp.Msg.GetEntry())
	return &e, nil
}

// Remove removes the entry at path, a directory with its content.
func (f *Files) Remove(ctx context.Context, path string, o FileOptions) error {
	ctx, cancel := f.e.unary(ctx)
	defer cancel()
	if _, err := f.e.fs.Remove(ctx, rpc(f.e, &fspb.RemoveRequest{Path: path}, o.User)); err != nil {
		return rpcErr(err, "remove %s", path)
	}
	return nil
}

// URLOptions describe a signed file URL.
type URLOptions struct {
	User string
	// Expires, when non-zero, is when the URL stops working.
	Expires time.Time
}

// DownloadURL is a URL that reads the file at path without the access
// token, e.g. from a browser; it reaches the sandbox by host name (or
// Config.SandboxURL).
func (f *Files) DownloadURL(path string, o URLOptions) string { return f.e.signedURL(path, "read", o) }

// UploadURL is a URL that takes a multipart upload to path (see DownloadURL).
func (f *Files) UploadURL(path string, o URLOptions) string { return f.e.signedURL(path, "write", o) }

// signedURL signs path, operation and user with the access token, as
// envd checks it; sandboxes without a token need no signature.
func (e *envd) signedURL(path, op string, o URLOptions) string {
	tok := e.accessToken()
	if tok == "" {
		return e.filesURL(e.direct, path, o.User, nil)
	}
	user := e.user(o.User)
	raw := path + ":" + op + ":" + user + ":" + tok
	extra := url.Values{}
	if !o.Expires.IsZero() {
		exp := strconv.FormatInt(o.Expires.Unix(), 10)
		raw += ":" + exp
		extra.Set("signature_expiration", exp)
	}
	sum := sha256.Sum256([]byte(raw))
	extra.Set("signature", "v1_"+base64.RawStdEncoding.EncodeToString(sum[:]))
	return e.filesURL(e.direct, path, o.User, extra)
}
