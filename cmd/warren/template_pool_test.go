package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestTemplatePoolCommand(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("X-Admin-Token")+" "+r.Header.Get("X-Team-ID")+" "+string(b))
		mu.Unlock()
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/admin/templates/myapp/pool":
			json.NewEncoder(w).Encode(map[string]any{"templateID": "tid1", "buildID": "b1", "size": 3, "ready": 0})
		case r.Method == http.MethodGet && r.URL.Path == "/admin/pools":
			json.NewEncoder(w).Encode([]map[string]any{{"templateID": "tid1", "buildID": "b1", "size": 3, "ready": 2}})
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"code":404,"message":"template \"nope\" not found"}`)
		}
	}))
	t.Cleanup(srv.Close)
	common := []string{"--url", srv.URL, "--admin-token", "adm", "--team", "t1"}
	for _, tc := range []struct {
		name    string
		args    []string
		want    string
		wantErr string
		call    string
	}{
		{"set", []string{"pool", "set", "myapp", "--size", "3"}, "pool of tid1 (build b1): size 3, 0 ready", "", `PUT /admin/templates/myapp/pool adm t1 {"size":3}`},
		{"list", []string{"pool", "list"}, "tid1      b1     3     2", "", "GET /admin/pools adm t1 "},
		{"unknown template", []string{"pool", "set", "nope", "--size", "1"}, "", `template "nope" not found`, ""},
		{"size required", []string{"pool", "set", "myapp"}, "", "--size is required", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			got = nil
			mu.Unlock()
			out, err := runTemplate(t, append(tc.args, common...)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output %q lacks %q", out, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0] != tc.call {
				t.Errorf("requests %q, want %q", got, tc.call)
			}
		})
	}
}
