package awsauth_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/awsauth"
	"github.com/warren-sandbox/warren/internal/awsauth/awsauthtest"
	"github.com/warren-sandbox/warren/internal/errdefs"
)

func TestECRLogin(t *testing.T) {
	t.Parallel()
	creds := awsauth.Credentials{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "secret/key+1"}
	fake := awsauthtest.NewECR(t, creds, "eu-west-1", "registry-pass")
	answer := func(status int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL + "/"
	}
	// hang answers nothing until the client gives up (the body is read
	// first: only then does the server notice the client hanging up).
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(hang.Close)
	for _, tc := range []struct {
		name     string
		ecr      awsauth.ECR
		class    error
		contains string
	}{
		{"right keys", awsauth.ECR{Credentials: creds, Region: "eu-west-1", Endpoint: fake.URL}, nil, ""},
		{"wrong secret", awsauth.ECR{Credentials: awsauth.Credentials{AccessKeyID: creds.AccessKeyID, SecretAccessKey: "nope"}, Region: "eu-west-1", Endpoint: fake.URL},
			errdefs.ErrUnauthorized, "InvalidSignatureException): The request signature we calculated does not match"},
		{"unknown key", awsauth.ECR{Credentials: awsauth.Credentials{AccessKeyID: "AKIAOTHER", SecretAccessKey: creds.SecretAccessKey}, Region: "eu-west-1", Endpoint: fake.URL},
			errdefs.ErrUnauthorized, "UnrecognizedClientException): The security token included in the request is invalid."},
		{"signed for another region", awsauth.ECR{Credentials: creds, Region: "us-east-1", Endpoint: fake.URL}, errdefs.ErrUnauthorized, "signature"},
		{"access denied", awsauth.ECR{Credentials: creds, Region: "eu-west-1", Endpoint: answer(400, `{"__type":"com.amazon.coral.service#AccessDeniedException","Message":"User is not authorized to perform: ecr:GetAuthorizationToken"}`)},
			errdefs.ErrUnauthorized, "AccessDeniedException): User is not authorized"},
		{"ECR failing", awsauth.ECR{Credentials: creds, Region: "eu-west-1", Endpoint: answer(500, `{"__type":"ServerException","message":"boom"}`)}, errdefs.ErrUnavailable, "boom"},
		{"no token in the answer", awsauth.ECR{Credentials: creds, Region: "eu-west-1", Endpoint: answer(200, `{"authorizationData":[]}`)}, errdefs.ErrUnavailable, "no authorization token"},
		{"token not user:password", awsauth.ECR{Credentials: creds, Region: "eu-west-1", Endpoint: answer(200, `{"authorizationData":[{"authorizationToken":"bm9jb2xvbg=="}]}`)}, errdefs.ErrUnavailable, "not user:password"},
		{"no answer in time", awsauth.ECR{Credentials: creds, Region: "eu-west-1", Endpoint: hang.URL + "/", Timeout: 300 * time.Millisecond}, errdefs.ErrUnavailable, "no answer"},
		{"missing secret", awsauth.ECR{Credentials: awsauth.Credentials{AccessKeyID: "A"}, Region: "eu-west-1", Endpoint: fake.URL}, errdefs.ErrInvalid, "required"},
		{"bad region", awsauth.ECR{Credentials: creds, Region: "evil.example.com/x", Endpoint: fake.URL}, errdefs.ErrInvalid, "not an AWS region"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, pass, err := tc.ecr.Login(context.Background())
			if tc.class == nil {
				if err != nil || user != "AWS" || pass != "registry-pass" {
					t.Fatalf("Login = %q, %q, %v; want AWS, registry-pass", user, pass, err)
				}
				return
			}
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("Login error = %v; want %v containing %q", err, tc.class, tc.contains)
			}
			if strings.Contains(err.Error(), tc.ecr.Credentials.SecretAccessKey) && tc.ecr.Credentials.SecretAccessKey != "" {
				t.Fatalf("error shows the secret: %v", err)
			}
		})
	}
	if fake.Calls() != 1 {
		t.Errorf("fake ECR answered %d tokens, want 1", fake.Calls())
	}
}

func TestValidRegion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		region string
		ok     bool
	}{
		{"us-east-1", true}, {"us-gov-west-1", true}, {"cn-north-1", true}, {"ap-southeast-5", true},
		{"", false}, {"us-east", false}, {"US-EAST-1", false}, {"us-east-1.evil.com", false}, {"a/b-1", false},
	} {
		t.Run(tc.region, func(t *testing.T) {
			if got := awsauth.ValidRegion(tc.region); got != tc.ok {
				t.Errorf("ValidRegion(%q) = %v, want %v", tc.region, got, tc.ok)
			}
		})
	}
}
