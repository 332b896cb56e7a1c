package apiserver_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTemplateBuildTenantAttacks sends, with ordinary API keys of two
// teams, what a tenant found to work: a COPY through a symbolic link of
// the uploaded context that read the host's files, and an upload under
// another team's filesHash that planted its layer in that team's builds.
func TestTemplateBuildTenantAttacks(t *testing.T) {
	needRootForBuild(t)
	t.Parallel()
	e := newTemplateEnv(t)
	secretDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(secretDir, "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	const hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	// build uploads ctx (a tar) for a new template name of key's team
	// and builds steps; it returns the build's status and reason.
	build := func(key, name string, ctx []byte, steps string) (string, string) {
		t.Helper()
		c := e.createTemplate(key, `{"name":"`+name+`"}`)
		r := e.do("GET", "/templates/"+c.TemplateID+"/files/"+hash, key, "")
		expect(t, "files", r, http.StatusCreated)
		var f struct {
			URL string `json:"url"`
		}
		decodeJSON(t, r, &f)
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(ctx)
		zw.Close()
		req, _ := http.NewRequest("PUT", f.URL, &gz)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("upload: %v %v", resp, err)
		}
		resp.Body.Close()
		expect(t, "start build", e.do("POST", "/v2/templates/"+c.TemplateID+"/builds/"+c.BuildID, key,
			`{"fromTemplate":"base","steps":[`+strings.ReplaceAll(steps, "HASH", hash)+`]}`), http.StatusAccepted)
		bi := e.waitBuild(key, c.TemplateID, c.BuildID)
		reason := ""
		if bi.Reason != nil {
			reason = bi.Reason.Message
		}
		return bi.Status, reason
	}
	mkTar := func(hs ...*tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hs {
			body := h.Linkname
			if h.Typeflag == tar.TypeReg {
				h.Size, h.Linkname = int64(len(body)), ""
			}
			h.Mode = 0o644
			tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				tw.Write([]byte(body))
			}
		}
		tw.Close()
		return buf.Bytes()
	}

	t.Run("COPY through a link to the host", func(t *testing.T) {
		ctx := mkTar(&tar.Header{Name: "root", Typeflag: tar.TypeSymlink, Linkname: "/"},
			&tar.Header{Name: "d/up", Typeflag: tar.TypeSymlink, Linkname: "../../../../../.."})
		for i, src := range []string{"root" + secretDir + "/secret", "d/up" + secretDir + "/secret", "d/up/proc/self/environ"} {
			status, reason := build(e.key1, "leak-"+itoa(i), ctx, `{"type":"COPY","args":["`+src+`","/stolen","",""],"filesHash":"HASH"}`)
			if status != "error" || !strings.Contains(reason, "no such file in the build context") {
				t.Errorf("COPY %s: %s %q, want the build failed: no such file in the build context", src, status, reason)
			}
		}
	})
	t.Run("layer planted under another team's hash", func(t *testing.T) {
		steps := `{"type":"COPY","args":["who.txt","/who.txt","",""],"filesHash":"HASH"}`
		for _, c := range []struct{ key, team, who string }{{e.key1, "t1", "one"}, {e.key2, "t2", "two"}, {e.key1, "t1", "three"}} {
			name := "cache-" + c.who
			if status, reason := build(c.key, name, mkTar(&tar.Header{Name: "who.txt", Typeflag: tar.TypeReg, Linkname: c.who}), steps); status != "ready" {
				t.Fatalf("%s: %s %q", name, status, reason)
			}
			nt, err := e.local.Catalog.Resolve(context.Background(), c.team, name)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(nt.RootFS, "who.txt")); err != nil || string(b) != c.who {
				t.Errorf("team %s's %s has who.txt %q, %v; want its own upload %q", c.team, name, b, err, c.who)
			}
		}
	})
}
