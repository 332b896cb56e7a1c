package awsauth

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// exampleCreds are the credentials of AWS's published SigV4 examples.
var exampleCreds = Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}

// TestSignPublishedVectors signs AWS's published examples and compares
// with AWS's expected Authorization headers:
//   - the IAM ListUsers GET of "Create a signed AWS API request" (AWS
//     General Reference, sigv4-create-canonical-request and
//     sigv4-add-signature-to-request pages, 20150830T123600Z);
//   - get-vanilla-query-order-key-case of AWS's Signature Version 4 test
//     suite (signature-v4-test-suite), which sorts the query.
func TestSignPublishedVectors(t *testing.T) {
	t.Parallel()
	at := time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, url, region, service string
		headers                    map[string]string
		canonical                  string // "" when the source gives none
		auth                       string
	}{
		{
			name: "iam ListUsers", url: "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08", region: "us-east-1", service: "iam",
			headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
			canonical: "GET\n/\nAction=ListUsers&Version=2010-05-08\n" +
				"content-type:application/x-www-form-urlencoded; charset=utf-8\nhost:iam.amazonaws.com\nx-amz-date:20150830T123600Z\n\n" +
				"content-type;host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
			auth: "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
		},
		{
			name: "test suite get-vanilla-query-order-key-case", url: "https://example.amazonaws.com/?Param2=value2&Param1=value1", region: "us-east-1", service: "service",
			auth: "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			if err := Sign(req, nil, exampleCreds, tc.region, tc.service, at); err != nil {
				t.Fatal(err)
			}
			if got := req.Header.Get("X-Amz-Date"); got != "20150830T123600Z" {
				t.Errorf("X-Amz-Date = %q", got)
			}
			if tc.canonical != "" {
				if got, _ := CanonicalRequest(req, nil); got != tc.canonical {
					t.Errorf("canonical request:\n%s\nwant:\n%s", got, tc.canonical)
				}
			}
			if got := req.Header.Get("Authorization"); got != tc.auth {
				t.Errorf("Authorization:\n%s\nwant:\n%s", got, tc.auth)
			}
		})
	}
}

func TestSignDetails(t *testing.T) {
	t.Parallel()
	at := time.Date(2015, 8, 30, 12, 36, 0, 0, time.UTC)
	sign := func(t *testing.T, c Credentials, body string, mutate func(*http.Request)) *http.Request {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "https://api.ecr.eu-west-1.amazonaws.com/", strings.NewReader(body))
		req.Header.Set("X-Amz-Target", "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken")
		if mutate != nil {
			mutate(req)
		}
		if err := Sign(req, []byte(body), c, "eu-west-1", "ecr", at); err != nil {
			t.Fatal(err)
		}
		return req
	}
	base := sign(t, exampleCreds, "{}", nil).Header.Get("Authorization")
	for _, tc := range []struct {
		name   string
		req    *http.Request
		differ bool
		check  func(*http.Request) string
	}{
		{"same request signs the same", sign(t, exampleCreds, "{}", nil), false, nil},
		{"body is signed", sign(t, exampleCreds, "{ }", nil), true, nil},
		{"header is signed", sign(t, exampleCreds, "{}", func(r *http.Request) { r.Header.Set("X-Amz-Target", "x") }), true, nil},
		{"header spaces are collapsed", sign(t, exampleCreds, "{}", func(r *http.Request) {
			r.Header.Set("X-Amz-Target", "  AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken ")
		}), false, nil},
		{"secret is the key", sign(t, Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "other"}, "{}", nil), true, nil},
		{"session token is sent and signed", sign(t, Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: exampleCreds.SecretAccessKey, SessionToken: "tok"}, "{}", nil), true,
			func(r *http.Request) string {
				if r.Header.Get("X-Amz-Security-Token") != "tok" || !strings.Contains(r.Header.Get("Authorization"), ";x-amz-security-token;") {
					return "no signed X-Amz-Security-Token"
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.req.Header.Get("Authorization")
			if (got != base) != tc.differ {
				t.Errorf("Authorization %s\nbase %s\nwant differ=%v", got, base, tc.differ)
			}
			if tc.check != nil {
				if msg := tc.check(tc.req); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
	t.Run("missing secret", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, "https://example.amazonaws.com/", nil)
		if err := Sign(req, nil, Credentials{AccessKeyID: "A"}, "us-east-1", "ecr", at); err == nil {
			t.Fatal("signed without a secret")
		}
	})
	t.Run("secret stays out of String", func(t *testing.T) {
		if s := exampleCreds.String(); strings.Contains(s, exampleCreds.SecretAccessKey) {
			t.Fatalf("String() = %q shows the secret", s)
		}
	})
}

func TestCanonicalQueryAndPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"b=2&a=1", "a=1&b=2"},
		{"a=2&a=1", "a=1&a=2"},
		{"k=a%20b", "k=a%20b"},
		{"k=a+b", "k=a%2Bb"},
		{"k=%7E~", "k=~~"},
		{"flag", "flag="},
	} {
		t.Run("query "+tc.in, func(t *testing.T) {
			if got := canonicalQuery(tc.in); got != tc.want {
				t.Errorf("canonicalQuery(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	for _, tc := range []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"/a b", "/a%20b"},
		{"/a%20b", "/a%2520b"},
	} {
		t.Run("path "+tc.in, func(t *testing.T) {
			if got := canonicalPath(tc.in); got != tc.want {
				t.Errorf("canonicalPath(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
