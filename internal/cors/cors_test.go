package cors_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/warren-sandbox/warren/internal/cors"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	reached := 0
	srv := httptest.NewServer(cors.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		w.Header().Set("X-Next-Token", "n")
		io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("OPTIONS", srv.URL+"/v2/sandboxes", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "x-api-key, authorization, content-type")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := resp.Header
	if resp.StatusCode != 204 || h.Get("Access-Control-Allow-Origin") != "*" || h.Get("Access-Control-Allow-Headers") != "x-api-key, authorization, content-type" || h.Get("Access-Control-Allow-Methods") == "" || reached != 0 {
		t.Fatalf("preflight: %d %v (reached %d)", resp.StatusCode, h, reached)
	}
	req, _ = http.NewRequest("GET", srv.URL+"/v2/sandboxes", nil)
	req.Header.Set("Origin", "https://app.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "*" || resp.Header.Get("Access-Control-Expose-Headers") == "" || reached != 1 {
		t.Fatalf("cross-origin GET: %v", resp.Header)
	}
	req, _ = http.NewRequest("GET", srv.URL+"/", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("same-origin request got CORS headers: %v", resp.Header)
	}
}
