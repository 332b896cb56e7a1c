//go:build linux

package files

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/envd/auth"
	"github.com/warren-sandbox/warren/internal/envd/envdtest"
	"github.com/warren-sandbox/warren/internal/envd/filesystem"
	"github.com/warren-sandbox/warren/internal/envd/state"
	"github.com/warren-sandbox/warren/internal/testenv"
)

const token = "secret-token"

func newServer(t testing.TB, withToken bool) *httptest.Server {
	t.Helper()
	st := state.New(nil)
	u := "root"
	if os.Geteuid() != 0 {
		u = os.Getenv("USER")
	}
	upd := state.Update{DefaultUser: &u}
	if withToken {
		tok := token
		upd.AccessToken = &tok
	}
	st.Apply(upd)
	a := auth.New(st)
	mux := http.NewServeMux()
	mux.Handle("/files", New(testenv.Logger(t), a))
	srv := httptest.NewServer(a.Middleware(mux))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, u string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestDownload(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	dir := t.TempDir()
	f := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(f, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok := map[string]string{"X-Access-Token": token}
	future := time.Now().Add(time.Hour).Unix()
	past := time.Now().Add(-time.Hour).Unix()
	q := func(path, sig string, exp int64) string {
		v := url.Values{"path": {path}}
		if sig != "" {
			v.Set("signature", sig)
		}
		if exp != 0 {
			v.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		return srv.URL + "/files?" + v.Encode()
	}
	cases := []struct {
		name   string
		url    string
		hdr    map[string]string
		status int
		body   string
	}{
		{"ok with token", q(f, "", 0), tok, 200, "hello"},
		{"missing", q(filepath.Join(dir, "missing.txt"), "", 0), tok, 404, fmt.Sprintf(`{"code":404,"message":"path '%s' does not exist"}`+"\n", filepath.Join(dir, "missing.txt"))},
		{"directory", q(dir, "", 0), tok, 400, fmt.Sprintf(`{"code":400,"message":"path '%s' is a directory"}`+"\n", dir)},
		{"no token", q(f, "", 0), nil, 401, ""},
		{"wrong token", q(f, "", 0), map[string]string{"X-Access-Token": "nope"}, 401, ""},
		{"signed", q(f, auth.Sign(f, auth.OpRead, "", token, 0), 0), nil, 200, "hello"},
		{"signed with expiry", q(f, auth.Sign(f, auth.OpRead, "", token, future), future), nil, 200, "hello"},
		{"expired signature", q(f, auth.Sign(f, auth.OpRead, "", token, past), past), nil, 401, `{"code":401,"message":"signature is already expired"}` + "\n"},
		{"bad signature", q(f, "v1_bad", 0), nil, 401, `{"code":401,"message":"invalid signature"}` + "\n"},
		{"write signature cannot read", q(f, auth.Sign(f, auth.OpWrite, "", token, 0), 0), nil, 401, ""},
		{"unknown user", q(f, "", 0) + "&username=no-such-user-xyz", tok, 401, ""},
		{"not acceptable", q(f, "", 0), map[string]string{"X-Access-Token": token, "Accept-Encoding": "br, identity;q=0"}, 406, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := get(t, tc.url, tc.hdr)
			if status != tc.status || (tc.body != "" && body != tc.body) {
				t.Fatalf("got %d %q, want %d %q", status, body, tc.status, tc.body)
			}
		})
	}
	t.Run("empty_gzip", func(t *testing.T) {
		empty := filepath.Join(dir, "empty")
		if err := os.WriteFile(empty, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		status, body, h := get(t, q(empty, "", 0), map[string]string{"X-Access-Token": token, "Accept-Encoding": "gzip"})
		if status != 200 || h.Get("Content-Encoding") != "gzip" {
			t.Fatalf("empty file with gzip: %d %q %v", status, body, h)
		}
		zr, err := gzip.NewReader(strings.NewReader(body))
		if err != nil {
			t.Fatalf("empty file: not a whole gzip stream: %v", err)
		}
		if b, err := io.ReadAll(zr); err != nil || len(b) != 0 {
			t.Fatalf("empty file: %q %v", b, err)
		}
	})
	t.Run("unreadable_gzip", func(t *testing.T) {
		// A file whose first read fails (here /proc/self/mem at offset 0)
		// is an error answer, not a 200 with an empty gzip stream that
		// clients decode as an empty file.
		status, body, h := get(t, q("/proc/self/mem", "", 0), map[string]string{"X-Access-Token": token, "Accept-Encoding": "gzip"})
		if status < 400 || h.Get("Content-Encoding") == "gzip" {
			t.Fatalf("unreadable file with gzip: %d %q %v", status, body, h)
		}
	})
	t.Run("gzip", func(t *testing.T) {
		status, body, h := get(t, q(f, "", 0), map[string]string{"X-Access-Token": token, "Accept-Encoding": "gzip"})
		if status != 200 || h.Get("Content-Encoding") != "gzip" {
			t.Fatalf("got %d %v", status, h)
		}
		zr, err := gzip.NewReader(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(zr); string(b) != "hello" {
			t.Fatalf("gunzipped %q", b)
		}
	})
}

type entry struct {
	Name     string            `json:"name"`
	Path     string            `json:"path"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata"`
}

func post(t *testing.T, u, ctype string, body io.Reader, hdr map[string]string) (int, []entry, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, body)
	req.Header.Set("Content-Type", ctype)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var es []entry
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &es); err != nil {
			t.Fatalf("answer %q: %v", b, err)
		}
	}
	return resp.StatusCode, es, string(b)
}

func multipartBody(t *testing.T, files map[string]string) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for name, content := range files {
		w, err := mw.CreateFormFile("file", name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(content))
	}
	_ = mw.Close()
	return mw.FormDataContentType(), &buf
}

func TestUpload(t *testing.T) {
	t.Parallel()
	srv := newServer(t, false)
	dir := t.TempDir()
	t.Run("multipart single with path", func(t *testing.T) {
		p := filepath.Join(dir, "deep/er/a.txt")
		ct, body := multipartBody(t, map[string]string{p: "A"})
		status, es, raw := post(t, srv.URL+"/files?path="+url.QueryEscape(p), ct, body, nil)
		if status != 200 || len(es) != 1 || es[0].Path != p || es[0].Name != "a.txt" || es[0].Type != "file" {
			t.Fatalf("%d %s", status, raw)
		}
		if b, _ := os.ReadFile(p); string(b) != "A" {
			t.Fatalf("content %q", b)
		}
	})
	t.Run("multipart several by filename", func(t *testing.T) {
		p1, p2 := filepath.Join(dir, "m/1.txt"), filepath.Join(dir, "m/2.txt")
		ct, body := multipartBody(t, map[string]string{p1: "one", p2: "two"})
		status, es, raw := post(t, srv.URL+"/files", ct, body, nil)
		if status != 200 || len(es) != 2 {
			t.Fatalf("%d %s", status, raw)
		}
		for p, want := range map[string]string{p1: "one", p2: "two"} {
			if b, _ := os.ReadFile(p); string(b) != want {
				t.Fatalf("%s: %q", p, b)
			}
		}
	})
	t.Run("octet-stream gzip overwrite", func(t *testing.T) {
		p := filepath.Join(dir, "o.bin")
		if err := os.WriteFile(p, []byte("old content that is longer"), 0o644); err != nil {
			t.Fatal(err)
		}
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		_, _ = zw.Write([]byte("new"))
		_ = zw.Close()
		status, _, raw := post(t, srv.URL+"/files?path="+url.QueryEscape(p), "application/octet-stream", &zb, map[string]string{"Content-Encoding": "gzip"})
		if status != 200 {
			t.Fatalf("%d %s", status, raw)
		}
		if b, _ := os.ReadFile(p); string(b) != "new" {
			t.Fatalf("content %q", b)
		}
	})
	t.Run("metadata", func(t *testing.T) {
		p := filepath.Join(dir, "meta.txt")
		status, es, raw := post(t, srv.URL+"/files?path="+url.QueryEscape(p), "application/octet-stream", strings.NewReader("x"),
			map[string]string{"X-Metadata-Owner-Team": "blue"})
		if status == 500 && strings.Contains(raw, "extended attributes") {
			envdtest.Require(t, false, "user xattrs unsupported here")
		}
		if status != 200 || es[0].Metadata["owner-team"] != "blue" {
			t.Fatalf("%d %s", status, raw)
		}
		md, _ := filesystem.ReadMetadata(p)
		if md["owner-team"] != "blue" {
			t.Fatalf("xattrs %v", md)
		}
	})
	t.Run("bad metadata", func(t *testing.T) {
		status, _, _ := post(t, srv.URL+"/files?path=x", "application/octet-stream", strings.NewReader("x"),
			map[string]string{"X-Metadata-K": strings.Repeat("v", 5000)})
		if status != 400 {
			t.Fatalf("status %d", status)
		}
	})
	t.Run("onto a directory", func(t *testing.T) {
		status, _, _ := post(t, srv.URL+"/files?path="+url.QueryEscape(dir), "application/octet-stream", strings.NewReader("x"), nil)
		if status != 400 {
			t.Fatalf("status %d", status)
		}
	})
	t.Run("raw without path", func(t *testing.T) {
		status, _, _ := post(t, srv.URL+"/files", "application/octet-stream", strings.NewReader("x"), nil)
		if status != 400 {
			t.Fatalf("status %d", status)
		}
	})
}

func TestUploadSignedAndToken(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	p := filepath.Join(t.TempDir(), "s.txt")
	u := srv.URL + "/files?path=" + url.QueryEscape(p)
	if status, _, _ := post(t, u, "application/octet-stream", strings.NewReader("x"), nil); status != 401 {
		t.Fatalf("unsigned: %d", status)
	}
	if status, _, raw := post(t, u+"&signature="+url.QueryEscape(auth.Sign(p, auth.OpWrite, "", token, 0)), "application/octet-stream", strings.NewReader("x"), nil); status != 200 {
		t.Fatalf("signed: %d %s", status, raw)
	}
	if status, _, raw := post(t, u, "application/octet-stream", strings.NewReader("x"), map[string]string{"X-Access-Token": token}); status != 200 {
		t.Fatalf("token: %d %s", status, raw)
	}
}

// TestUploadAsNormalUser: files and parents belong to the user; a path the
// user may not write (also through ".." or a symbolic link) is refused.
func TestUploadAsNormalUser(t *testing.T) {
	u := envdtest.NewUser(t)
	srv := newServer(t, false)
	q := "&username=" + u.Name
	status, es, raw := post(t, srv.URL+"/files?path=sub/f.txt"+q, "application/octet-stream", strings.NewReader("x"), nil)
	if status != 200 || es[0].Path != filepath.Join(u.Home, "sub/f.txt") {
		t.Fatalf("%d %s", status, raw)
	}
	for _, p := range []string{filepath.Join(u.Home, "sub"), filepath.Join(u.Home, "sub/f.txt")} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != u.UID || sys.Gid != u.GID {
			t.Fatalf("%s owned by %d:%d, want %d:%d", p, sys.Uid, sys.Gid, u.UID, u.GID)
		}
	}
	// As E2B's envd: writes are made as root on the user's behalf, so a
	// directory the user could not write is no obstacle, and what is
	// created belongs to the user; what existed keeps its owner.
	base, err := os.MkdirTemp("/tmp", "envd-write-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	priv := filepath.Join(base, "priv")
	if err := os.Mkdir(priv, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(priv, filepath.Join(u.Home, "privlink")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{priv + "/new/a.txt", "privlink/b.txt", "../../" + strings.TrimPrefix(priv, "/") + "/c.txt"} {
		status, _, raw := post(t, srv.URL+"/files?path="+url.QueryEscape(p)+q, "application/octet-stream", strings.NewReader("x"), nil)
		if status != 200 {
			t.Fatalf("%s: %d %s", p, status, raw)
		}
	}
	owners := map[string]uint32{priv: 0, priv + "/new": u.UID, priv + "/new/a.txt": u.UID, priv + "/b.txt": u.UID, priv + "/c.txt": u.UID}
	for p, want := range owners {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Sys().(*syscall.Stat_t).Uid; got != want {
			t.Errorf("%s owned by %d, want %d", p, got, want)
		}
	}
	// Reading stays the user's: a file in a directory the user cannot
	// search is refused.
	if code, _, _ := get(t, srv.URL+"/files?path="+url.QueryEscape(priv+"/b.txt")+q, nil); code != 403 {
		t.Fatalf("read in a private directory as user: %d", code)
	}
	if code, _, _ := get(t, srv.URL+"/files?path=/etc/shadow"+q, nil); code != 403 {
		t.Fatalf("read /etc/shadow as user: %d", code)
	}
	// Relative paths resolve against the home; a directory is not a file.
	if status, _, raw := post(t, srv.URL+"/files?path=privlink"+q, "application/octet-stream", strings.NewReader("x"), nil); status != 400 {
		t.Fatalf("write over a directory: %d %s", status, raw)
	}
}

// zeros is an endless-looking reader of n zero bytes that allocates nothing.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > z.n {
		p = p[:z.n]
	}
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

// TestLargeUploadIsStreamed uploads 512 MiB (multipart and raw) and checks
// that the heap never grows by more than a small bound: the body goes to
// disk as it arrives.
func TestLargeUploadIsStreamed(t *testing.T) {
	srv := newServer(t, false)
	dir := t.TempDir()
	const size = 256 << 20
	const bound = 48 << 20
	for _, mode := range []string{"raw", "multipart"} {
		t.Run(mode, func(t *testing.T) {
			runtime.GC()
			var base runtime.MemStats
			runtime.ReadMemStats(&base)
			var peak atomic.Uint64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					if m.HeapInuse > peak.Load() {
						peak.Store(m.HeapInuse)
					}
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			}()
			p := filepath.Join(dir, mode+".bin")
			var body io.Reader = &zeros{n: size}
			ct := "application/octet-stream"
			if mode == "multipart" {
				pr, pw := io.Pipe()
				mw := multipart.NewWriter(pw)
				ct = mw.FormDataContentType()
				go func() {
					w, _ := mw.CreateFormFile("file", p)
					_, err := io.Copy(w, &zeros{n: size})
					if err == nil {
						err = mw.Close()
					}
					pw.CloseWithError(err)
				}()
				body = pr
			}
			status, _, raw := post(t, srv.URL+"/files?path="+url.QueryEscape(p), ct, body, nil)
			close(stop)
			<-sampled
			if status != 200 {
				t.Fatalf("%d %s", status, raw)
			}
			st, err := os.Stat(p)
			if err != nil || st.Size() != size {
				t.Fatalf("size %v %v", st, err)
			}
			_ = os.Remove(p)
			growth := int64(peak.Load()) - int64(base.HeapInuse)
			t.Logf("heap growth while uploading %d MiB: %.1f MiB", size>>20, float64(growth)/(1<<20))
			if growth > bound {
				t.Fatalf("heap grew by %d bytes uploading %d bytes: the body is buffered", growth, size)
			}
		})
	}
}

// TestUploadDiskFull fills a 1 MiB tmpfs: the answer is 507.
func TestUploadDiskFull(t *testing.T) {
	envdtest.RequireRoot(t)
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		envdtest.Require(t, false, "cannot mount a tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	srv := newServer(t, false)
	p := filepath.Join(dir, "big.bin")
	status, _, raw := post(t, srv.URL+"/files?path="+url.QueryEscape(p), "application/octet-stream", &zeros{n: 4 << 20}, nil)
	if status != http.StatusInsufficientStorage || !strings.Contains(raw, `"code":507`) {
		t.Fatalf("got %d %s", status, raw)
	}
}
