package e2eserve

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// APIOptions describe one `warren api`.
type APIOptions struct {
	Name       string // in the test's log: "warren api", "replica 1"
	Listen     string // HOST:PORT
	DSN        string // its Postgres database
	APIKey     string
	AdminToken string
	// NodeToken names the test's node credential key (the API's
	// WARREN_NODE_CREDENTIAL_KEY is made from it, the same for every
	// replica given the same): the nodes registering at this API get
	// their own tokens issued through its admin API (Node.Run).
	NodeToken string
	// ExtraArgs are added to the command line (node liveness tuning).
	ExtraArgs []string
}

// ShortLiveness are APIOptions.ExtraArgs that tune node liveness short,
// for a test that kills a node: without a heartbeat for 11 s it gets no
// new sandboxes, for 16 s it is lost and its sandboxes, paused ones too,
// are killed with node_lost.
var ShortLiveness = []string{"--node-unreachable-after", "11s", "--node-lost-after", "16s", "--node-paused-lost-after", "16s"}

// API is a running `warren api`.
type API struct {
	Name string
	// URL is its E2B_API_URL; Env holds the E2B_* variables it printed.
	URL   string
	Env   map[string]string
	Admin Admin
	P     *Proc
}

// StartAPI runs warren api with o (no metrics listener of its own) and
// waits for its exports; the test's end stops it.
func StartAPI(t testing.TB, o APIOptions) *API {
	t.Helper()
	args := append([]string{"api", "--listen", o.Listen, "--database-url", o.DSN, "--api-key", o.APIKey,
		"--admin-token", o.AdminToken, "--metrics-listen", "", "--node-ca", CAFile(t)}, o.ExtraArgs...)
	p := StartProc(t, o.Name, exec.Command(os.Getenv("WARREN_WARREN"), args...), "WARREN_NODE_CREDENTIAL_KEY="+credentialKey(o.NodeToken))
	env := p.Exports(t, "E2B_API_URL", "E2B_SANDBOX_URL")
	a := &API{Name: o.Name, URL: env["E2B_API_URL"], Env: env, Admin: Admin{URL: env["E2B_API_URL"], Token: o.AdminToken}, P: p}
	apis.Store(a.URL, a.Admin)
	return a
}

// apis are the admin APIs of the started APIs by URL, where Node.Run
// issues a node's token.
var apis sync.Map

// IssueNodeToken issues node nodeID's own token through the admin API.
func (a Admin) IssueNodeToken(t testing.TB, nodeID string) string {
	t.Helper()
	code, b := Call(t, "POST", a.URL+"/admin/nodes/"+nodeID+"/tokens", map[string]string{"X-Admin-Token": a.Token}, `{"name":"e2e"}`)
	var out struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	if code != 201 || json.Unmarshal(b, &out) != nil || out.Token == "" {
		t.Fatalf("issue node %s's token: %d %s", nodeID, code, b)
	}
	return out.Token
}

// Leads reports whether the replica holds the leader lease (its metrics
// say api_leader 1).
func (a *API) Leads(t testing.TB) bool {
	t.Helper()
	return strings.Contains(string(a.Admin.Call(t, "GET", "/metrics")), "\napi_leader 1\n")
}

// Call sends a request with header and body (JSON, when given) to url and
// returns the answer's status and body; a request that gets no answer
// fails the test.
func Call(t testing.TB, method, url string, header map[string]string, body ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(strings.Join(body, "")))
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// Admin calls the admin endpoints of the warren api at URL, with Token.
type Admin struct {
	URL, Token string
}

// Call sends an admin request for path and returns the body of its 2xx
// answer; any other answer fails the test.
func (a Admin) Call(t testing.TB, method, path string) []byte {
	t.Helper()
	code, b := Call(t, method, a.URL+path, map[string]string{"X-Admin-Token": a.Token})
	if code/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, a.URL+path, code, b)
	}
	return b
}

// NodeInfo is what the tests read of GET /admin/nodes.
type NodeInfo struct {
	ID           string   `json:"id"`
	Status       string   `json:"status"`
	ProxyAddress string   `json:"proxyAddress"`
	BootID       string   `json:"bootID"`
	Sandboxes    int      `json:"sandboxes"`
	Templates    []string `json:"templates"`
}

// Nodes is GET /admin/nodes, by node ID.
func (a Admin) Nodes(t testing.TB) map[string]NodeInfo {
	t.Helper()
	var list []NodeInfo
	if err := json.Unmarshal(a.Call(t, "GET", "/admin/nodes"), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]NodeInfo{}
	for _, n := range list {
		out[n.ID] = n
	}
	return out
}

// WaitNodes waits, as WaitFor, until cond holds of the registered nodes,
// and returns them.
func (a Admin) WaitNodes(t testing.TB, what string, timeout time.Duration, cond func(map[string]NodeInfo) bool) map[string]NodeInfo {
	t.Helper()
	var m map[string]NodeInfo
	WaitFor(t, what, timeout, func() (bool, any) {
		m = a.Nodes(t)
		return cond(m), m
	})
	return m
}

// WaitFor polls cond every 250 ms until it holds; after timeout (generous:
// the machine is loaded) it fails the test with what and cond's last state.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, any)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last %+v", what, timeout, state)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
