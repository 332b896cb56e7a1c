package nodebuild_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodebuild"
)

// token is the control plane's credential on every test node's routes,
// pullKey the key of every test node's pull grants.
const (
	token   = "node-token-0123456789"
	pullKey = "node-pull-key-0123456789"
)

// remoteConfig is the identity part of a test control plane: its calls
// carry token, its grants are made with pullKey, and a question with
// token as its bearer is any node's.
func remoteConfig(cfg nodebuild.RemoteConfig) nodebuild.RemoteConfig {
	cfg.Credential = func(context.Context, string) (string, error) { return token, nil }
	cfg.Grant = func(_ context.Context, _, buildID, requester string) (string, error) {
		return nodeauth.Grant(pullKey, buildID, requester, time.Now().Add(nodeauth.GrantTTL)), nil
	}
	cfg.Authenticate = func(r *http.Request) (string, error) {
		if nodeauth.Bearer(r.Header) != token {
			return "", errdefs.ErrUnauthorized
		}
		return "", nil
	}
	return cfg
}

// grantTo is a holder at addr with a grant for build buildID.
func grantTo(addr, buildID string) nodebuild.Holder {
	return nodebuild.Holder{Address: addr, Grant: nodeauth.Grant(pullKey, buildID, "puller", time.Now().Add(nodeauth.GrantTTL))}
}

func get(t *testing.T, url, tok string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}
