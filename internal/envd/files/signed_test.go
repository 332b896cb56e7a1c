//go:build linux

package files

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/envd/auth"
)

// part is one part of a multipart body: a file part when file is set.
type part struct {
	form, file, content string
}

func parts(t *testing.T, ps ...part) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range ps {
		var err error
		var w interface{ Write([]byte) (int, error) }
		if p.file != "" {
			w, err = mw.CreateFormFile(p.form, p.file)
		} else {
			w, err = mw.CreateFormField(p.form)
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(p.content))
	}
	_ = mw.Close()
	return mw.FormDataContentType(), &buf
}

// signedURL is the URL the SDK's uploadUrl/downloadUrl builds: path,
// username, signature and signature_expiration, in that order.
func signedURL(base, path, op, user, tok string, exp int64) string {
	v := url.Values{}
	if user != "" {
		v.Set("username", user)
	}
	if path != "" {
		v.Set("path", path)
	}
	v.Set("signature", auth.Sign(path, op, user, tok, exp))
	if exp != 0 {
		v.Set("signature_expiration", strconv.FormatInt(exp, 10))
	}
	return base + "/files?" + v.Encode()
}

// TestSignedURLGrantsOnePath is the signed-URL attack suite on envd: a
// URL signed for one path, one operation, one user and one expiry grants
// exactly that. A multipart upload on a signed URL writes its one file to
// the signed path; a part naming another path, a second file part or a
// URL signed for no path are refused with 403 before anything is written.
func TestSignedURLGrantsOnePath(t *testing.T) {
	t.Parallel()
	srv := newServer(t, true)
	dir := t.TempDir()
	future := time.Now().Add(time.Hour).Unix()
	absent := func(t *testing.T, paths ...string) {
		t.Helper()
		for _, p := range paths {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Errorf("%s exists after a refused upload (%v)", p, err)
			}
		}
	}

	t.Run("second part naming another path", func(t *testing.T) {
		a, evil := filepath.Join(dir, "1/a.txt"), filepath.Join(dir, "1/.bashrc_evil")
		ct, body := parts(t, part{"file", a, "A"}, part{"file", evil, "EVIL"})
		status, _, raw := post(t, signedURL(srv.URL, a, auth.OpWrite, "", token, future), ct, body, nil)
		if status != http.StatusForbidden || !strings.Contains(raw, "only the path it was signed for") {
			t.Fatalf("%d %s, want 403", status, raw)
		}
		absent(t, a, evil)
	})
	t.Run("second part onto an existing signed path", func(t *testing.T) {
		a, evil := filepath.Join(dir, "2/a.txt"), filepath.Join(dir, "2/evil")
		if err := os.MkdirAll(filepath.Dir(a), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(a, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		ct, body := parts(t, part{"file", "a.txt", "new"}, part{"file", evil, "EVIL"})
		if status, _, raw := post(t, signedURL(srv.URL, a, auth.OpWrite, "", token, 0), ct, body, nil); status != http.StatusForbidden {
			t.Fatalf("%d %s, want 403", status, raw)
		}
		if b, _ := os.ReadFile(a); string(b) != "old" {
			t.Fatalf("the signed path was changed by a refused upload: %q", b)
		}
		absent(t, evil)
		ents, _ := os.ReadDir(filepath.Dir(a))
		if len(ents) != 1 {
			t.Fatalf("the refused upload left %v", ents)
		}
	})
	t.Run("two parts for the signed path", func(t *testing.T) {
		a := filepath.Join(dir, "3/a.txt")
		ct, body := parts(t, part{"file", a, "one"}, part{"file", a, "two"})
		if status, _, raw := post(t, signedURL(srv.URL, a, auth.OpWrite, "", token, 0), ct, body, nil); status != http.StatusForbidden {
			t.Fatalf("%d %s, want 403", status, raw)
		}
		absent(t, a)
	})
	t.Run("first part naming another path", func(t *testing.T) {
		a, evil := filepath.Join(dir, "4/a.txt"), filepath.Join(dir, "4/evil")
		ct, body := parts(t, part{"file", evil, "EVIL"})
		if status, _, raw := post(t, signedURL(srv.URL, a, auth.OpWrite, "", token, 0), ct, body, nil); status != http.StatusForbidden {
			t.Fatalf("%d %s, want 403", status, raw)
		}
		absent(t, a, evil)
	})
	t.Run("signed for no path", func(t *testing.T) {
		evil := filepath.Join(dir, "5/evil")
		ct, body := parts(t, part{"file", evil, "EVIL"})
		if status, _, raw := post(t, signedURL(srv.URL, "", auth.OpWrite, "", token, 0), ct, body, nil); status != http.StatusForbidden {
			t.Fatalf("%d %s, want 403", status, raw)
		}
		absent(t, evil)
	})
	t.Run("one part with the browser's file name", func(t *testing.T) {
		a := filepath.Join(dir, "6/a.txt")
		ct, body := parts(t, part{"note", "", "ignored"}, part{"file", "local-name.txt", "A"}, part{"other", "", "ignored"})
		status, es, raw := post(t, signedURL(srv.URL, a, auth.OpWrite, "", token, future), ct, body, nil)
		if status != 200 || len(es) != 1 || es[0].Path != a {
			t.Fatalf("%d %s", status, raw)
		}
		if b, _ := os.ReadFile(a); string(b) != "A" {
			t.Fatalf("content %q", b)
		}
		absent(t, filepath.Join(dir, "6/local-name.txt"))
	})
	t.Run("one part naming the signed path over an existing file", func(t *testing.T) {
		a := filepath.Join(dir, "7/a.txt")
		if err := os.MkdirAll(filepath.Dir(a), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(a, []byte("old content, longer"), 0o640); err != nil {
			t.Fatal(err)
		}
		ct, body := parts(t, part{"file", a, "new"})
		if status, es, raw := post(t, signedURL(srv.URL, a, auth.OpWrite, "", token, 0), ct, body, nil); status != 200 || len(es) != 1 {
			t.Fatalf("%d %s", status, raw)
		}
		st, _ := os.Stat(a)
		if b, _ := os.ReadFile(a); string(b) != "new" || st.Mode().Perm() != 0o640 {
			t.Fatalf("content %q mode %v: want the file rewritten in place", b, st.Mode())
		}
		ents, _ := os.ReadDir(filepath.Dir(a))
		if len(ents) != 1 {
			t.Fatalf("the upload left %v", ents)
		}
	})
	t.Run("token upload keeps several parts", func(t *testing.T) {
		p1, p2 := filepath.Join(dir, "8/1"), filepath.Join(dir, "8/2")
		ct, body := parts(t, part{"file", p1, "1"}, part{"file", p2, "2"})
		if status, es, raw := post(t, srv.URL+"/files", ct, body, map[string]string{"X-Access-Token": token}); status != 200 || len(es) != 2 {
			t.Fatalf("%d %s", status, raw)
		}
	})

	// The other three bounds: operation, user, expiry; and the sandbox.
	f := filepath.Join(dir, "r.txt")
	if err := os.WriteFile(f, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.txt")
	if err := os.WriteFile(other, []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	me := os.Getenv("USER")
	if os.Geteuid() == 0 {
		me = "root"
	}
	good := signedURL(srv.URL, f, auth.OpRead, "", token, future)
	for _, tc := range []struct {
		name, method, url string
		want              int
	}{
		{"the read URL reads", "GET", good, 200},
		{"the read URL heads", "HEAD", good, 200},
		{"read URL used to write", "POST", good, 401},
		{"write URL used to read", "GET", signedURL(srv.URL, f, auth.OpWrite, "", token, future), 401},
		{"path swapped", "GET", strings.Replace(good, url.QueryEscape(f), url.QueryEscape(other), 1), 401},
		{"path given twice", "GET", good + "&path=" + url.QueryEscape(other), 401},
		{"path given twice, signed one last", "GET", srv.URL + "/files?path=" + url.QueryEscape(other) + "&" + strings.SplitN(good, "?", 2)[1], 401},
		{"username added", "GET", good + "&username=" + me, 401},
		{"username swapped", "GET", strings.Replace(signedURL(srv.URL, f, auth.OpRead, "nobody", token, future), "username=nobody", "username="+me, 1), 401},
		{"expiry extended", "GET", strings.Replace(good, strconv.FormatInt(future, 10), strconv.FormatInt(future+3600, 10), 1), 401},
		{"expiry removed", "GET", strings.Replace(good, "&signature_expiration="+strconv.FormatInt(future, 10), "", 1), 401},
		{"expired", "GET", signedURL(srv.URL, f, auth.OpRead, "", token, time.Now().Add(-time.Minute).Unix()), 401},
		{"another sandbox's token", "GET", signedURL(srv.URL, f, auth.OpRead, "", "another-sandbox-token", future), 401},
		{"signature given twice", "GET", good + "&signature=" + url.QueryEscape(auth.Sign(other, auth.OpRead, "", token, future)), 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader("x"))
			if tc.method == "POST" {
				req.Header.Set("Content-Type", "application/octet-stream")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("%s %s: %d, want %d", tc.method, tc.url, resp.StatusCode, tc.want)
			}
		})
	}
	if b, _ := os.ReadFile(f); string(b) != "secret" {
		t.Fatalf("%s was written: %q", f, b)
	}
}
