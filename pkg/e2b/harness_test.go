package e2b

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	envdsrv "github.com/warren-sandbox/warren/internal/envd"
	"github.com/warren-sandbox/warren/pkg/client"
)

// The unit tests run the SDK against one httptest server that plays the
// API (a small in-memory implementation of the REST calls the SDK makes)
// and the proxy in front of a real envd (internal/envd's handler, which
// runs the commands on this host), as warren serve does in plain-http
// mode: requests with E2b-Sandbox-Id go to envd.

const (
	testKey   = "e2b_unit"
	testToken = "tok-unit"
)

type fakeSandbox struct {
	detail client.SandboxDetail
	paused bool
}

type fakeAPI struct {
	t    *testing.T
	envd http.Handler

	mu        sync.Mutex
	next      int
	sandboxes map[string]*fakeSandbox
	order     []string
	creates   []client.NewSandbox
	timeouts  map[string]int
	envdSeen  int // envd requests that passed the header checks
	// envdVersion is the version created sandboxes report (0.6.13 when
	// empty); envdReqs records the envd requests that reached envd.
	envdVersion string
	envdReqs    []envdReq
}

// envdReq is what the tests check of a request to envd.
type envdReq struct {
	Method, Path                  string
	ContentType, ContentEncoding  string
	AcceptEncoding, Authorization string
	Username                      string
}

// envdCount is how many requests reached envd.
func (f *fakeAPI) envdCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.envdReqs)
}

// requests returns the recorded envd requests to path.
func (f *fakeAPI) requests(path string) []envdReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []envdReq
	for _, r := range f.envdReqs {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// newServer starts the fake API with a real envd behind it; envd's
// access token is testToken, so every envd call must carry it.
func newServer(t *testing.T) (*fakeAPI, Config) {
	t.Helper()
	cfg := envdsrv.DefaultConfig()
	cfg.PortForward = false
	cfg.Init = false
	cfg.TemplateEnv = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root"}
	srv, err := envdsrv.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	body := fmt.Sprintf(`{"accessToken":%q,"defaultUser":"root"}`, testToken)
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/init", strings.NewReader(body)))
	if rec.Code >= 300 {
		t.Fatalf("envd /init: %d %s", rec.Code, rec.Body)
	}
	f := &fakeAPI{t: t, envd: hostHome(t, srv.Handler()), sandboxes: map[string]*fakeSandbox{}, timeouts: map[string]int{}}
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	return f, Config{APIKey: testKey, APIURL: hs.URL, SandboxURL: hs.URL, Domain: "unit.test"}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		f.proxy(w, r, id)
		return
	}
	if r.Header.Get("X-API-Key") != testKey {
		writeJSON(w, 401, client.Error{Code: 401, Message: "bad key"})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/sandboxes", f.create)
	mux.HandleFunc("GET /v2/sandboxes", f.list)
	mux.HandleFunc("GET /sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if sb := f.get(w, r); sb != nil {
			writeJSON(w, 200, sb.detail)
		}
	})
	mux.HandleFunc("DELETE /sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if f.get(w, r) != nil {
			delete(f.sandboxes, r.PathValue("id"))
			w.WriteHeader(204)
		}
	})
	mux.HandleFunc("POST /sandboxes/{id}/timeout", func(w http.ResponseWriter, r *http.Request) {
		var req client.TimeoutRequest
		if sb := f.get(w, r); sb != nil && decode(w, r, &req) {
			f.timeouts[sb.detail.SandboxID] = req.Timeout
			w.WriteHeader(204)
		}
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		if sb := f.get(w, r); sb != nil {
			if sb.paused {
				writeJSON(w, 409, client.Error{Code: 409, Message: "already paused"})
				return
			}
			sb.paused, sb.detail.State = true, "paused"
			w.WriteHeader(204)
		}
	})
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", func(w http.ResponseWriter, r *http.Request) {
		var req client.ConnectRequest
		if sb := f.get(w, r); sb != nil && decode(w, r, &req) {
			status := 200
			if sb.paused {
				status = 201
			}
			sb.paused, sb.detail.State = false, "running"
			f.timeouts[sb.detail.SandboxID] = *req.Timeout
			writeJSON(w, status, f.answer(sb))
		}
	})
	// fork makes the first copy and refuses the others, to show that each
	// fork succeeds or fails on its own.
	mux.HandleFunc("POST /sandboxes/{id}/fork", func(w http.ResponseWriter, r *http.Request) {
		var req client.ForkRequest
		if sb := f.get(w, r); sb != nil && decode(w, r, &req) {
			res := []client.ForkResult{}
			for i := range *req.Count {
				if i > 0 {
					res = append(res, client.ForkResult{Error: &client.Error{Code: 429, Message: "limit"}})
					continue
				}
				f.next++
				id := "sbx" + strconv.Itoa(f.next)
				c := &fakeSandbox{detail: sb.detail}
				c.detail.SandboxID = id
				f.sandboxes[id] = c
				f.order = append(f.order, id)
				res = append(res, client.ForkResult{Sandbox: &client.Sandbox{SandboxID: id, EnvdAccessToken: testToken}})
			}
			writeJSON(w, 201, res)
		}
	})
	mux.ServeHTTP(w, r)
}

func (f *fakeAPI) get(w http.ResponseWriter, r *http.Request) *fakeSandbox {
	sb := f.sandboxes[r.PathValue("id")]
	if sb == nil {
		writeJSON(w, 404, client.Error{Code: 404, Message: "sandbox not found"})
	}
	return sb
}

func (f *fakeAPI) create(w http.ResponseWriter, r *http.Request) {
	var req client.NewSandbox
	if !decode(w, r, &req) {
		return
	}
	f.creates = append(f.creates, req)
	f.next++
	id := "sbx" + strconv.Itoa(f.next)
	sb := &fakeSandbox{detail: client.SandboxDetail{ListedSandbox: client.ListedSandbox{
		TemplateID: req.TemplateID, SandboxID: id, StartedAt: time.Now(), State: "running",
		Metadata: req.Metadata, EnvdVersion: cmp.Or(f.envdVersion, "0.6.13")}, EnvdAccessToken: testToken}}
	f.sandboxes[id] = sb
	f.order = append(f.order, id)
	writeJSON(w, 201, f.answer(sb))
}

func (f *fakeAPI) answer(sb *fakeSandbox) client.Sandbox {
	return client.Sandbox{TemplateID: sb.detail.TemplateID, SandboxID: sb.detail.SandboxID,
		EnvdVersion: sb.detail.EnvdVersion, EnvdAccessToken: testToken}
}

// list pages by the position in creation order; nextToken is the index
// of the page's first sandbox.
func (f *fakeAPI) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		var err error
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			writeJSON(w, 400, client.Error{Code: 400, Message: "startedAfter: " + err.Error()})
			return
		}
	}
	start, _ := strconv.Atoi(q.Get("nextToken"))
	var out []client.ListedSandbox
	i := start
	for ; i < len(f.order) && (limit == 0 || len(out) < limit); i++ {
		if sb := f.sandboxes[f.order[i]]; sb != nil && (q.Get("state") == "" || q.Get("state") == sb.detail.State) &&
			sb.detail.StartedAt.After(after) {
			out = append(out, sb.detail.ListedSandbox)
		}
	}
	if i < len(f.order) {
		w.Header().Set("X-Next-Token", strconv.Itoa(i))
	}
	writeJSON(w, 200, out)
}

// proxy checks the routing headers and sends the request on to envd.
func (f *fakeAPI) proxy(w http.ResponseWriter, r *http.Request, id string) {
	f.mu.Lock()
	sb := f.sandboxes[id]
	f.mu.Unlock()
	if sb == nil || sb.paused {
		writeJSON(w, 502, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": 502})
		return
	}
	if p := r.Header.Get("E2b-Sandbox-Port"); p != "49983" {
		f.t.Errorf("%s %s: E2b-Sandbox-Port %q", r.Method, r.URL.Path, p)
	}
	f.mu.Lock()
	f.envdSeen++
	f.envdReqs = append(f.envdReqs, envdReq{Method: r.Method, Path: r.URL.Path,
		ContentType: r.Header.Get("Content-Type"), ContentEncoding: r.Header.Get("Content-Encoding"),
		AcceptEncoding: r.Header.Get("Accept-Encoding"), Authorization: r.Header.Get("Authorization"),
		Username: r.URL.Query().Get("username")})
	f.mu.Unlock()
	f.envd.ServeHTTP(w, r)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeJSON(w, 400, client.Error{Code: 400, Message: err.Error()})
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// syncBuffer is a strings.Builder safe for the handle's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
