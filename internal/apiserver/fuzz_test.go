package apiserver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// fuzzRoutes are the routes whose JSON bodies tenants (and the operator)
// send; the fuzz input picks one by index.
var fuzzRoutes = []struct{ method, path, who string }{
	{"POST", "/sandboxes", "team"},
	{"POST", "/v3/templates", "team"},
	{"POST", "/templates/tags", "team"},
	{"POST", "/webhooks", "team"},
	{"POST", "/admin/teams", "admin"},
	{"POST", "/sandboxes/nosuchsandbox/fork", "team"},
	{"PUT", "/sandboxes/nosuchsandbox/network", "team"},
	{"POST", "/v2/sandboxes/nosuchsandbox/connect", "team"},
}

// FuzzRequestBodies sends arbitrary bodies to the JSON routes: whatever
// the body, the answer is a client error or a success with a JSON body,
// never a 5xx or a dropped connection (a handler panic).
func FuzzRequestBodies(f *testing.F) {
	for _, seed := range []struct {
		route int
		body  string
	}{
		{0, `{"templateID":"base","timeout":60,"metadata":{"a":"b"},"envVars":{"X":"1"}}`},
		{0, `{"templateID":"base","network":{"allowOut":["1.2.3.4/32"],"denyOut":["0.0.0.0/0"]},"autoPause":true}`},
		{0, `{"templateID":"base:`},
		{1, `{"name":"mine:v1","cpuCount":2,"memoryMB":1024}`},
		{2, `{"target":"mine:v1","tags":["x"]}`},
		{3, `{"url":"https://example.com/h","events":["sandbox.lifecycle.created"]}`},
		{4, `{"name":"t9","limits":{"maxConcurrent":1}}`},
		{5, `{"count":3}`},
		{6, `{"allowInternetAccess":false,"allowOut":["10.0.0.0/8"]}`},
		{7, `{"timeout":60}`},
	} {
		f.Add(seed.route, seed.body)
	}
	e := newEnv(f)
	f.Fuzz(func(t *testing.T, route int, body string) {
		if route < 0 {
			route = -route
		}
		rt := fuzzRoutes[route%len(fuzzRoutes)]
		req, err := http.NewRequest(rt.method, e.srv.URL+rt.path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if rt.who == "admin" {
			req.Header.Set("X-Admin-Token", adminToken)
		} else {
			req.Header.Set("X-API-Key", e.key2)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s %q: %v (a handler panic drops the connection)", rt.method, rt.path, body, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := result{resp.StatusCode, resp.Header, b}
		if r.status >= 500 {
			t.Fatalf("%s %s %q: %d %s", rt.method, rt.path, body, r.status, r.body)
		}
		if len(r.body) > 0 && !json.Valid(r.body) {
			t.Fatalf("%s %s %q: %d answered with a body that is not JSON: %q", rt.method, rt.path, body, r.status, r.body)
		}
	})
}
