// Package awsauthtest is a fake Amazon ECR API for tests: it checks each
// GetAuthorizationToken request's SigV4 signature by signing it again with
// the expected credentials, and answers a token for a fixed password.
package awsauthtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/awsauth"
)

// ECR is a running fake ECR API on the loopback interface.
type ECR struct {
	URL   string
	calls atomic.Int64
}

// Calls is how many requests the fake answered a token to.
func (e *ECR) Calls() int { return int(e.calls.Load()) }

// NewECR starts a fake ECR API for region that accepts requests signed
// with creds and answers the authorization token "AWS:"+password. Any
// other request gets the error answer AWS gives (400 with __type and
// message). It stops when the test ends.
func NewECR(t testing.TB, creds awsauth.Credentials, region, password string) *ECR {
	t.Helper()
	e := &ECR{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := Verify(r, body, creds, region, "ecr"); err != "" {
			typ := "UnrecognizedClientException"
			if strings.Contains(err, "signature") {
				typ = "InvalidSignatureException"
			}
			fail(w, typ, err)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/" ||
			r.Header.Get("X-Amz-Target") != "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken" ||
			r.Header.Get("Content-Type") != "application/x-amz-json-1.1" || string(body) != "{}" {
			fail(w, "UnknownOperationException", "not a GetAuthorizationToken request")
			return
		}
		e.calls.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		json.NewEncoder(w).Encode(map[string]any{"authorizationData": []map[string]any{{
			"authorizationToken": base64.StdEncoding.EncodeToString([]byte("AWS:" + password)),
			"expiresAt":          float64(time.Now().Add(12 * time.Hour).Unix()),
			"proxyEndpoint":      "https://123456789012.dkr.ecr." + region + ".amazonaws.com",
		}}})
	}))
	t.Cleanup(srv.Close)
	e.URL = srv.URL + "/"
	return e
}

func fail(w http.ResponseWriter, typ, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
}

// Verify checks that r (with body) carries a SigV4 signature by creds for
// region and service: it rebuilds the request from the signed headers,
// signs it with awsauth.Sign at the request's X-Amz-Date and compares the
// Authorization headers. It returns "" when they match, else what is
// wrong, worded like AWS's messages.
func Verify(r *http.Request, body []byte, creds awsauth.Credentials, region, service string) string {
	got := r.Header.Get("Authorization")
	if got == "" {
		return "Missing Authentication Token"
	}
	_, signedList, ok := strings.Cut(got, "SignedHeaders=")
	if !ok {
		return "Authorization header has no SignedHeaders"
	}
	signedList, _, _ = strings.Cut(signedList, ",")
	if !strings.Contains(got, "Credential="+creds.AccessKeyID+"/") {
		return "The security token included in the request is invalid."
	}
	t, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "X-Amz-Date is missing or malformed"
	}
	again, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return err.Error()
	}
	for _, h := range strings.Split(signedList, ";") {
		if h == "host" || h == "x-amz-date" || h == "x-amz-security-token" {
			continue
		}
		for _, v := range r.Header.Values(h) {
			again.Header.Add(h, v)
		}
	}
	if err := awsauth.Sign(again, body, creds, region, service, t); err != nil {
		return err.Error()
	}
	if want := again.Header.Get("Authorization"); got != want {
		return "The request signature we calculated does not match the signature you provided."
	}
	return ""
}
