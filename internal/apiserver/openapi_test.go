package apiserver_test

// The REST API's document, api/warren-openapi.json, against the server and
// pkg/client: every route the server serves is in the document and every
// operation in it is served (TestSpecRoutes); every request the other tests
// make through conformTo is an operation of the document answered with a
// status it declares and a body of its schema, and pkg/client's requests
// send only the fields the document names (conformTo, over newEnv,
// newEventsEnv and newTemplateEnv); pkg/client's types name only fields of
// their schemas (TestClientTypesInSpec).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/warren-sandbox/warren/internal/apiserver"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/nodereg"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/pkg/client"
)

const specFile = "../../api/warren-openapi.json"

// clientHeader marks the requests pkg/client makes in these tests, whose
// bodies conformTo holds to the document strictly (the other tests send
// unknown fields on purpose: the server ignores them).
const clientHeader = "X-Warren-Test-Client"

type openAPI struct {
	Paths      map[string]map[string]*operation `json:"paths"`
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
}

type operation struct {
	OperationID string `json:"operationId"`
	Parameters  []struct {
		Name string `json:"name"`
		In   string `json:"in"`
	} `json:"parameters"`
	RequestBody *struct {
		Content map[string]struct {
			Schema *schema `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]struct {
			Schema *schema `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
	Security *[]map[string][]string `json:"security"`
	// ServedBy names the package serving a route outside the API server's
	// mux (the builder's upload URL).
	ServedBy string `json:"x-warren-served-by"`
}

type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Properties           map[string]*schema `json:"properties"`
	Items                *schema            `json:"items"`
	AdditionalProperties *schema            `json:"additionalProperties"`
}

var loadSpec = sync.OnceValues(func() (*openAPI, error) {
	b, err := os.ReadFile(specFile)
	if err != nil {
		return nil, err
	}
	var doc openAPI
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", specFile, err)
	}
	return &doc, nil
})

func spec(t testing.TB) *openAPI {
	t.Helper()
	doc, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// resolve follows s's $ref.
func (d *openAPI) resolve(s *schema) *schema {
	for s != nil && s.Ref != "" {
		s = d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
	}
	return s
}

// match finds the operation serving method and the escaped path p: the
// document's path with the same segments, literal ones equal, the most
// literal one winning (/sandboxes/metrics over /sandboxes/{id}).
func (d *openAPI) match(method, p string) (string, *operation) {
	segs := strings.Split(strings.Trim(p, "/"), "/")
	best, bestLit := "", -1
	for sp := range d.Paths {
		ss := strings.Split(strings.Trim(sp, "/"), "/")
		if len(ss) != len(segs) {
			continue
		}
		lit := 0
		for i, s := range ss {
			if strings.HasPrefix(s, "{") {
				continue
			}
			if s != segs[i] {
				lit = -1
				break
			}
			lit++
		}
		if lit > bestLit && d.Paths[sp][strings.ToLower(method)] != nil {
			best, bestLit = sp, lit
		}
	}
	if best == "" {
		return "", nil
	}
	return best, d.Paths[best][strings.ToLower(method)]
}

// check reports the properties of v its schema does not name.
func (d *openAPI) check(where string, v any, s *schema, bad func(string)) {
	s = d.resolve(s)
	if s == nil {
		return
	}
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			switch {
			case s.Properties != nil:
				ps, ok := s.Properties[k]
				if !ok {
					bad(fmt.Sprintf("%s: property %q is not in the document", where, k))
					continue
				}
				d.check(where+"."+k, val, ps, bad)
			case s.AdditionalProperties != nil:
				d.check(where+"["+k+"]", val, s.AdditionalProperties, bad)
			}
		}
	case []any:
		for i, val := range v {
			d.check(fmt.Sprintf("%s[%d]", where, i), val, s.Items, bad)
		}
	}
}

// conformTo wraps the API handler h of a test server: each request it
// serves must be an operation of the document, answered with a status the
// operation declares and a JSON body its schema names; a request of
// pkg/client (clientHeader) must send a body of the operation's schema.
// What does not conform fails t when t ends.
func conformTo(t testing.TB, h http.Handler) http.Handler {
	doc := spec(t)
	var (
		mu   sync.Mutex
		errs []string
	)
	bad := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(errs, s) {
			errs = append(errs, s)
		}
	}
	t.Cleanup(func() {
		for _, e := range errs {
			t.Errorf("api/warren-openapi.json: %s", e)
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var reqBody []byte
		if r.Body != nil {
			reqBody, _ = readAll(r)
		}
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if r.Method == http.MethodOptions { // CORS preflights, on any path
			return
		}
		sp, op := doc.match(r.Method, r.URL.EscapedPath())
		name := r.Method + " " + r.URL.Path
		if op == nil {
			if rec.status != http.StatusNotFound && rec.status != http.StatusMethodNotAllowed {
				bad(fmt.Sprintf("%s answered %d: not an operation of the document", name, rec.status))
			}
			return
		}
		name = r.Method + " " + sp
		resp, ok := op.Responses[strconv.Itoa(rec.status)]
		if !ok {
			bad(fmt.Sprintf("%s answered %d, which it does not declare", name, rec.status))
			return
		}
		if js, ok := resp.Content["application/json"]; ok && rec.body.Len() > 0 {
			var v any
			if err := json.Unmarshal(rec.body.Bytes(), &v); err != nil {
				bad(fmt.Sprintf("%s %d: body is not JSON: %v", name, rec.status, err))
			} else {
				doc.check(fmt.Sprintf("%s %d", name, rec.status), v, js.Schema, bad)
			}
		}
		if r.Header.Get(clientHeader) != "" && len(bytes.TrimSpace(reqBody)) > 0 {
			if op.RequestBody == nil {
				bad(fmt.Sprintf("pkg/client sends a body to %s, which takes none", name))
				return
			}
			var v any
			if json.Unmarshal(reqBody, &v) == nil {
				doc.check("pkg/client's "+name+" body", v, op.RequestBody.Content["application/json"].Schema, bad)
			}
		}
	})
}

func readAll(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(r.Body)
	r.Body.Close()
	r.Body = readCloser{bytes.NewReader(buf.Bytes())}
	return buf.Bytes(), err
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// recorder passes a response through, keeping its status and body.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// stubPools is a warm-pool node part with no pools, for the routes.
type stubPools struct{}

func (stubPools) SetPool(context.Context, nodeapi.Template, sandbox.Resources, int) error { return nil }
func (stubPools) Reserve(nodeapi.Template, sandbox.Resources) (string, bool)              { return "", false }
func (stubPools) Unreserve(string)                                                        {}
func (stubPools) Pools() map[string]nodeapi.PoolStatus                                    { return nil }

// TestSpecRoutes: the routes of a server with every part configured are the
// document's operations, and each operation is served: unauthenticated, it
// answers the 401 it declares (204 for /health, 403 for the signed upload
// URL), and a method it does not declare is not served.
func TestSpecRoutes(t *testing.T) {
	t.Parallel()
	doc := spec(t)
	e := newTemplateEnv(t, func(c *apiserver.Config) {
		c.Pools = stubPools{}
		c.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("up 1\n")) })
	})
	e.api.MountEvents(apiserver.EventsConfig{})
	nodereg.NewRegistry(e.st.(nodereg.Store), nil, nil).AdminRoutes(e.api.HandleAdmin)
	creds, err := nodereg.NewCredentials(e.st.(store.NodeTokens), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	creds.AdminRoutes(e.api.HandleAdmin)

	served := map[string]bool{}
	for _, p := range e.api.Routes() {
		if p == "GET /templates/{a}/{b}" { // one mux route for two operations
			served["GET /templates/aliases/{alias}"] = true
			served["GET /templates/{id}/tags"] = true
			continue
		}
		served[p] = true
	}
	documented, ids := map[string]bool{}, map[string]bool{}
	for p, ops := range doc.Paths {
		for m, op := range ops {
			key := strings.ToUpper(m) + " " + p
			if op.ServedBy == "" {
				documented[key] = true
			}
			if op.OperationID == "" || ids[op.OperationID] {
				t.Errorf("%s: operationId %q missing or not unique", key, op.OperationID)
			}
			ids[op.OperationID] = true
			var inPath []string
			for _, prm := range op.Parameters {
				if prm.In == "path" {
					inPath = append(inPath, "{"+prm.Name+"}")
				}
			}
			var want []string
			for _, seg := range strings.Split(p, "/") {
				if strings.HasPrefix(seg, "{") {
					want = append(want, seg)
				}
			}
			slices.Sort(inPath)
			slices.Sort(want)
			if !slices.Equal(inPath, want) {
				t.Errorf("%s: path parameters %v, want %v", key, inPath, want)
			}
		}
	}
	for _, k := range sortedKeys(served) {
		if !documented[k] {
			t.Errorf("the server serves %s, which api/warren-openapi.json does not document", k)
		}
	}
	for _, k := range sortedKeys(documented) {
		if !served[k] {
			t.Errorf("api/warren-openapi.json documents %s, which the server does not serve", k)
		}
	}

	methods := []string{"GET", "POST", "PUT", "PATCH", "DELETE"}
	for p := range doc.Paths {
		path := p
		for _, seg := range strings.Split(p, "/") {
			if strings.HasPrefix(seg, "{") {
				path = strings.Replace(path, seg, "x1", 1)
			}
		}
		for _, m := range methods {
			// The operation serving m on path: another path's may
			// (DELETE /sandboxes/metrics is DELETE /sandboxes/{id}).
			_, op := doc.match(m, path)
			res := e.do(m, path, "", "")
			switch {
			case op == nil:
				if res.status != http.StatusNotFound && res.status != http.StatusMethodNotAllowed {
					t.Errorf("%s %s (not documented) answered %d", m, path, res.status)
				}
				continue
			case op.Security != nil && len(*op.Security) == 0:
				// Unauthenticated by design: /health, the upload URL.
			case res.status != http.StatusUnauthorized:
				t.Errorf("%s %s without credentials answered %d, want 401: %s", m, path, res.status, res.body)
			}
			if _, ok := op.Responses[strconv.Itoa(res.status)]; !ok {
				t.Errorf("%s %s answered %d, which %s does not declare", m, path, res.status, op.OperationID)
			}
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestClientTypesInSpec: every JSON field of pkg/client's wire types is a
// property of the schema of the same role in the document.
func TestClientTypesInSpec(t *testing.T) {
	t.Parallel()
	doc := spec(t)
	for name, v := range map[string]any{
		"Error": client.Error{}, "NewSandbox": client.NewSandbox{}, "AutoResume": client.AutoResume{},
		"NetworkConfig": client.NetworkConfig{}, "NetworkUpdate": client.NetworkUpdate{}, "VolumeMount": client.VolumeMount{},
		"Sandbox": client.Sandbox{}, "Lifecycle": client.Lifecycle{}, "ListedSandbox": client.ListedSandbox{},
		"SandboxDetail": client.SandboxDetail{}, "TimeoutRequest": client.TimeoutRequest{}, "RefreshRequest": client.RefreshRequest{},
		"ConnectRequest": client.ConnectRequest{}, "ResumeRequest": client.ResumeRequest{}, "PauseRequest": client.PauseRequest{},
		"ForkRequest": client.ForkRequest{}, "ForkResult": client.ForkResult{}, "SandboxMetric": client.Metric{},
		"SandboxesWithMetrics": client.SandboxesWithMetrics{}, "SandboxLog": client.LogLine{}, "SandboxLogEntry": client.LogEntry{},
		"SandboxLogs": client.SandboxLogs{}, "SandboxLogsV2": client.SandboxLogsV2{},
		"NewTemplate": client.NewTemplate{}, "TemplateCreated": client.TemplateCreated{}, "FilesUpload": client.FilesUpload{},
		"TemplateStep": client.TemplateStep{}, "RegistryAuth": client.RegistryAuth{}, "TemplateBuild": client.TemplateBuild{},
		"BuildLogEntry": client.BuildLogEntry{}, "BuildReason": client.BuildReason{}, "TemplateBuildInfo": client.TemplateBuildInfo{},
		"Template": client.Template{}, "TemplateAlias": client.TemplateAlias{}, "BuildLogs": client.BuildLogs{},
		"TemplateWithBuilds": client.TemplateWithBuilds{}, "TemplateBuildSummary": client.TemplateBuildSummary{},
		"TemplateUpdate": client.TemplateUpdate{}, "TemplateNames": client.TemplateNames{}, "TagsRequest": client.TagsRequest{},
		"TagsAssigned": client.TagsAssigned{}, "TemplateTag": client.TemplateTag{},
	} {
		s := doc.Components.Schemas[name]
		if s == nil {
			t.Errorf("schema %s (%T) is not in the document", name, v)
			continue
		}
		for _, f := range jsonFields(reflect.TypeOf(v)) {
			if _, ok := s.Properties[f]; !ok {
				t.Errorf("%T sends or reads %q, which schema %s does not name", v, f, name)
			}
		}
	}
}

// jsonFields are the JSON names of t's fields, embedded structs' included.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

// TestClientTemplateCalls drives pkg/client's template calls through
// conformTo: each is an operation of the document, with its fields.
func TestClientTemplateCalls(t *testing.T) {
	needRootForBuild(t)
	e := newTemplateEnv(t)
	ctx := context.Background()
	c := e.client(e.key1)
	cpu := 1
	created, err := c.CreateTemplate(ctx, client.NewTemplate{Name: "specflow", Tags: []string{"v1"}, CPUCount: &cpu})
	if err != nil {
		t.Fatal(err)
	}
	hash := strings.Repeat("ab", 32)
	up, err := c.TemplateFiles(ctx, created.TemplateID, hash)
	if err != nil || up.Present {
		t.Fatalf("files: %+v %v", up, err)
	}
	tarball := tarOf(t, true, map[string]string{"app/": "", "app/a.txt": "a"})
	if err := c.UploadFiles(ctx, up, bytes.NewReader(tarball), int64(len(tarball))); err != nil {
		t.Fatal(err)
	}
	build := client.TemplateBuild{FromTemplate: "base", StartCmd: "sleep infinity", ReadyCmd: "true", Steps: []client.TemplateStep{
		{Type: "COPY", Args: []string{"app", "/srv/app", "", ""}, FilesHash: hash},
	}}
	if err := c.StartTemplateBuild(ctx, created.TemplateID, created.BuildID, build); err != nil {
		t.Fatal(err)
	}
	if bi, err := c.WaitTemplateBuild(ctx, created.TemplateID, created.BuildID, 0, nil); err != nil || bi.Status != client.BuildReady {
		t.Fatalf("build: %+v %v", bi, err)
	}
	if ts, err := c.Templates(ctx); err != nil || len(ts) == 0 {
		t.Fatalf("templates: %v %v", ts, err)
	}
	if a, err := c.TemplateByAlias(ctx, "specflow"); err != nil || a.TemplateID != created.TemplateID {
		t.Fatalf("alias: %+v %v", a, err)
	}
	if ok, err := c.DeleteTemplate(ctx, created.TemplateID); !ok || err != nil {
		t.Fatalf("delete: %t %v", ok, err)
	}
}
