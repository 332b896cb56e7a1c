package builder

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/warren-sandbox/warren/internal/awsauth"
	"github.com/warren-sandbox/warren/internal/awsauth/awsauthtest"
	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// TestBuildFromECR builds FROM an image in a registry that takes basic
// auth user AWS with the password a (fake, local) ECR API hands out for
// correctly signed requests: the SDK's fromAWSRegistry credentials.
func TestBuildFromECR(t *testing.T) {
	needRoot(t)
	t.Parallel()
	creds := awsauth.Credentials{AccessKeyID: "AKIAWARRENTEST", SecretAccessKey: "s3cret/Key+Example"}
	ecr := awsauthtest.NewECR(t, creds, "eu-west-1", "ecr-registry-password")
	// stale hands out a password the registry does not take.
	stale := awsauthtest.NewECR(t, creds, "eu-west-1", "expired-password")
	reg := newRegistry(t, "AWS", "ecr-registry-password")
	ref := reg.push(t, "private/ecr:1", tinyRootFS(t), v1.Config{Env: []string{"PATH=/bin"}})
	f := newFixture(t, nil)
	// The operator's allow entries for the registry and the fake ECRs on
	// loopback (the token exchange goes through the egress dialer too).
	hostOf := func(u string) string { return strings.Trim(strings.TrimPrefix(u, "http://"), "/") }
	f.b.cfg.Transport = (&egress.Dialer{Policy: egress.MustParse(reg.host, hostOf(ecr.URL), hostOf(stale.URL), "127.0.0.1:1")}).Transport()
	auth := func(c awsauth.Credentials, region, endpoint string) *RegistryAuth {
		return &RegistryAuth{ECR: &awsauth.ECR{Credentials: c, Region: region, Endpoint: endpoint, Timeout: 30 * time.Second}}
	}
	tests := []struct {
		name     string
		auth     *RegistryAuth
		class    error
		contains string
	}{
		{"right keys", auth(creds, "eu-west-1", ecr.URL), nil, ""},
		{"wrong secret", auth(awsauth.Credentials{AccessKeyID: creds.AccessKeyID, SecretAccessKey: "wrong"}, "eu-west-1", ecr.URL),
			errdefs.ErrUnauthorized, "InvalidSignatureException): The request signature we calculated does not match"},
		{"unknown key", auth(awsauth.Credentials{AccessKeyID: "AKIANOBODY", SecretAccessKey: creds.SecretAccessKey}, "eu-west-1", ecr.URL),
			errdefs.ErrUnauthorized, "The security token included in the request is invalid"},
		{"unreachable ecr", auth(creds, "eu-west-1", "http://127.0.0.1:1/"), errdefs.ErrUnavailable, "ECR login in eu-west-1"},
		{"token the registry refuses", auth(creds, "eu-west-1", stale.URL), errdefs.ErrUnauthorized, "the registry refused the credentials"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := Spec{FromImage: ref, RegistryAuth: tc.auth, Steps: []Step{{Type: StepRun, Args: []string{"echo ok > /ok"}}}}
			bd, err := f.build(t, "team", "ecr-"+strings.ReplaceAll(tc.name, " ", "-"), spec)
			if tc.class == nil {
				if err != nil {
					t.Fatalf("%v\n%s", err, f.logs(t, bd.ID))
				}
				if got := readFile(t, bd.RootFSDir, "ok"); got != "ok\n" {
					t.Errorf("RUN result %q", got)
				}
				return
			}
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.class, tc.contains)
			}
			if bd.Status != templates.BuildError || bd.Reason == nil || !strings.Contains(bd.Reason.Message, tc.contains) || bd.Reason.Step != "base" {
				t.Errorf("build status %s reason %+v, want error at step base naming %q", bd.Status, bd.Reason, tc.contains)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error shows the secret: %v", err)
			}
		})
	}
	if ecr.Calls() != 1 {
		t.Errorf("ECR handed out %d tokens, want 1 (the right keys' build)", ecr.Calls())
	}
}
