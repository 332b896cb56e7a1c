package apiserver_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/templates"
)

// TestTemplateBuildExpand checks Warren's `expand` extension of a build
// step: with it the server expands the step's arguments from the build's
// environment at that point (the base template's PATH included), as
// `warren template build` asks for; without it (what the E2B SDK sends)
// they are taken as written.
func TestTemplateBuildExpand(t *testing.T) {
	needRootForBuild(t)
	t.Parallel()
	for _, tc := range []struct {
		name        string
		expand      string // the steps' "expand" member, "" for none
		wantPATH    string
		wantWorkdir string
		wantFile    string // where COPY put note.txt
		wantErr     string // the failed build's reason
		steps       string
	}{
		{
			name:        "expanded",
			expand:      `,"expand":true`,
			wantPATH:    "/opt/tools:" + templates.DefaultPath,
			wantWorkdir: "/w/srv/app/data",
			wantFile:    "/srv/app/cfg/note.txt",
		},
		{
			name:        "as written without the field",
			wantPATH:    "/opt/tools:$PATH",
			wantWorkdir: "/w$APPDIR/${SUB}",
			wantFile:    "/w$APPDIR/${SUB}/$APPDIR/cfg/note.txt",
		},
		{
			name:        "as written with expand false",
			expand:      `,"expand":false`,
			wantPATH:    "/opt/tools:$PATH",
			wantWorkdir: "/w$APPDIR/${SUB}",
			wantFile:    "/w$APPDIR/${SUB}/$APPDIR/cfg/note.txt",
		},
		{
			name:    "an expansion error fails the step",
			expand:  `,"expand":true`,
			steps:   `{"type":"WORKDIR","args":["${MISSING:?must be set}"],"expand":true}`,
			wantErr: "must be set",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newTemplateEnv(t)
			c := e.createTemplate(e.key1, `{"name":"expand"}`)
			hash := strings.Repeat("ab", 32)
			r := e.do("GET", "/templates/"+c.TemplateID+"/files/"+hash, e.key1, "")
			expect(t, "files", r, http.StatusCreated)
			var f struct {
				URL string `json:"url"`
			}
			decodeJSON(t, r, &f)
			req, _ := http.NewRequest("PUT", f.URL, bytes.NewReader(tarOf(t, true, map[string]string{"note.txt": "note"})))
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode/100 != 2 {
				t.Fatalf("upload: %v %v", resp, err)
			}
			resp.Body.Close()
			steps := tc.steps
			if steps == "" {
				x := tc.expand
				steps = `{"type":"ENV","args":["PATH","/opt/tools:$PATH","APPDIR","/srv/app"]` + x + `},
					{"type":"ARG","args":["SUB","data"]` + x + `},
					{"type":"WORKDIR","args":["/w$APPDIR/${SUB}"]` + x + `},
					{"type":"COPY","args":["note.txt","$APPDIR/cfg/","",""],"filesHash":"` + hash + `"` + x + `}`
			}
			body := `{"fromTemplate":"base","steps":[` + steps + `]}`
			expect(t, "start build", e.do("POST", "/v2/templates/"+c.TemplateID+"/builds/"+c.BuildID, e.key1, body), http.StatusAccepted)
			bi := e.waitBuild(e.key1, c.TemplateID, c.BuildID)
			if tc.wantErr != "" {
				if bi.Status != "error" || bi.Reason == nil || !strings.Contains(bi.Reason.Message, tc.wantErr) {
					t.Fatalf("build: status %s, reason %+v; want an error with %q", bi.Status, bi.Reason, tc.wantErr)
				}
				return
			}
			if bi.Status != "ready" {
				t.Fatalf("build: %+v", bi)
			}
			nt, err := e.local.Catalog.Resolve(context.Background(), "t1", "expand")
			if err != nil {
				t.Fatal(err)
			}
			if nt.Env["PATH"] != tc.wantPATH || nt.Env["APPDIR"] != "/srv/app" || nt.Workdir != tc.wantWorkdir {
				t.Errorf("template: PATH %q, APPDIR %q, workdir %q; want PATH %q, workdir %q",
					nt.Env["PATH"], nt.Env["APPDIR"], nt.Workdir, tc.wantPATH, tc.wantWorkdir)
			}
			if _, ok := nt.Env["SUB"]; ok {
				t.Errorf("the ARG reached the template's environment: %v", nt.Env)
			}
			if b, err := os.ReadFile(filepath.Join(nt.RootFS, tc.wantFile)); err != nil || string(b) != "note" {
				t.Errorf("copied file %s: %q %v", tc.wantFile, b, err)
			}
		})
	}
}
