package apiserver_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/pkg/client"
)

// TestForkValidation: a count outside 1..100 is a 400 naming the bounds,
// and a node whose driver cannot fork answers 501 (the SDK retries 503 as
// "busy", so unsupported must not be 503).
func TestForkValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := e.create(e.key2, client.NewSandbox{})
	for _, count := range []int{0, -1, 101} {
		res := e.do("POST", "/sandboxes/"+src.SandboxID+"/fork", e.key2, `{"count":`+strconv.Itoa(count)+`}`)
		if res.status != 400 || !strings.Contains(string(res.body), "must be between 1 and 100") {
			t.Errorf("count %d: %d %s", count, res.status, res.body)
		}
	}
	e.node.Caps.Fork = false
	res := e.do("POST", "/sandboxes/"+src.SandboxID+"/fork", e.key2, `{"count":1}`)
	var body client.Error
	if err := json.Unmarshal(res.body, &body); err != nil || res.status != 501 || body.Code != 501 {
		t.Fatalf("fork on a driver without fork: %d %s", res.status, res.body)
	}
}
