package noderole

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/envd"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// accessProbe runs images/code-interpreter/access.py (the code
// interpreter server's admission, standard library only) on the host's
// python3 against a real envd at url: for each token (null: no header)
// it prints envd's decision as the server takes it, and for each content
// type whether a POST with it is refused.
const accessProbe = `
import json, sys
sys.dont_write_bytecode = True  # nothing written into images/
sys.path.insert(0, "../../../images/code-interpreter")
import access
url, tokens, types = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
out = {"admit": [], "types": []}
for tok in tokens:
    try:
        s = access.Envd(url).admit(tok)
        out["admit"].append({"status": 200, "init_id": s.init_id, "envs": s.envs})
    except access.Denied as e:
        out["admit"].append({"status": int(e.status)})
for ct in types:
    try:
        access.check_body_type("POST", {"Content-Type": ct, "Content-Length": "2"})
        out["types"].append(200)
    except access.Denied as e:
        out["types"].append(int(e.status))
print(json.dumps(out))
`

type accessAnswer struct {
	Admit []struct {
		Status int               `json:"status"`
		InitID string            `json:"init_id"`
		Envs   map[string]string `json:"envs"`
	} `json:"admit"`
	Types []int `json:"types"`
}

func probeAccess(t *testing.T, url string, tokens []any, types []string) accessAnswer {
	t.Helper()
	if types == nil {
		types = []string{}
	}
	tj, _ := json.Marshal(tokens)
	cj, _ := json.Marshal(types)
	out, err := exec.Command("python3", "-c", accessProbe, url, string(tj), string(cj)).CombinedOutput()
	if err != nil {
		t.Fatalf("python3 access probe: %v\n%s", err, out)
	}
	var a accessAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("access probe answered %q: %v", out, err)
	}
	return a
}

// TestCodeInterpreterAccess: the code interpreter admits a request
// exactly when envd would (its token, or any request while envd has no
// token), refuses another token and a made-up one, fails closed when envd
// does not answer, reports envd's init ID (new after every /init) and the
// sandbox's env vars, and refuses a POST that is not JSON. The server's
// routes through the proxy are TestCodeInterpreter/auth (e2e/codeinterp).
func TestCodeInterpreterAccess(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("python3")
	testenv.Require(t, err == nil, "needs python3")
	cfg := envd.DefaultConfig()
	cfg.PortForward, cfg.Init = false, false
	sum := sha256.Sum256([]byte("node-token"))
	cfg.InitTokenSHA256 = hex.EncodeToString(sum[:])
	srv, err := envd.New(cfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	initWith := func(body string) {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL+"/init", strings.NewReader(body))
		req.Header.Set("X-Warren-Init-Token", "node-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("init %s: %v %v", body, resp, err)
		}
		resp.Body.Close()
	}

	// No token set (a sandbox created without secure): open, as envd is.
	open := probeAccess(t, ts.URL, []any{nil, "anything"}, nil)
	for i, a := range open.Admit {
		if a.Status != 200 {
			t.Errorf("no token set, request %d: %d, want admitted", i, a.Status)
		}
	}

	initWith(`{"accessToken":"sandbox-token","envVars":{"GLOBAL":"g"}}`)
	got := probeAccess(t, ts.URL, []any{"sandbox-token", nil, "", "other-sandbox-token", "sandbox-toke", "sandbox-token\u00e9", "sandbox-token\nX-Other: 1"},
		[]string{"application/json", "Application/JSON; charset=utf-8", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx"})
	if a := got.Admit[0]; a.Status != 200 || a.Envs["GLOBAL"] != "g" || len(a.InitID) < 32 || a.InitID == open.Admit[0].InitID {
		t.Errorf("the sandbox's token: %+v (init ID before /init %q), want admitted with the env and a new init ID", a, open.Admit[0].InitID)
	}
	for i, a := range got.Admit[1:] {
		if a.Status != http.StatusUnauthorized {
			t.Errorf("token %d: %d, want 401", i+1, a.Status)
		}
	}
	if want := []int{200, 200, 415, 415, 415, 415, 415}; !slices.Equal(got.Types, want) {
		t.Errorf("content types: %v, want %v", got.Types, want)
	}

	ts.Close()
	if a := probeAccess(t, ts.URL, []any{"sandbox-token"}, nil).Admit[0]; a.Status != http.StatusServiceUnavailable {
		t.Errorf("envd gone: %d, want 503 (refused)", a.Status)
	}
}
