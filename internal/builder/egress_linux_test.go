package builder

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/warren-sandbox/warren/internal/awsauth"
	"github.com/warren-sandbox/warren/internal/awsauth/awsauthtest"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/templates"
)

// TestFromImageOnLoopbackRefused is the attack: a tenant's fromImage names
// a service on the host's loopback. Without the operator's allow entry
// the builder never connects, and the build says why.
func TestFromImageOnLoopbackRefused(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	reg := newRegistry(t, "", "")
	ref := reg.push(t, "test/tiny:1", tinyRootFS(t), v1.Config{Env: []string{"PATH=/bin"}})
	f := newFixture(t, nil)
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "never", http.StatusTeapot)
	}))
	t.Cleanup(counted.Close)
	for _, from := range []string{ref, strings.TrimPrefix(counted.URL, "http://") + "/x:y", "localhost:" + counted.URL[strings.LastIndex(counted.URL, ":")+1:] + "/x:y"} {
		bd, err := f.build(t, "team", "loopback", Spec{FromImage: from})
		if !errors.Is(err, errdefs.ErrForbidden) || !strings.Contains(err.Error(), "egress policy") {
			t.Fatalf("build from %s: %v, want refused by the egress policy", from, err)
		}
		if bd.Status != templates.BuildError || bd.Reason == nil || !strings.Contains(bd.Reason.Message, "egress policy") {
			t.Fatalf("build status %s reason %+v", bd.Status, bd.Reason)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the loopback service got %d requests", hits.Load())
	}
}

// TestRegistryAnswerNotEchoed: an (allowed) registry that fails answers
// with text; the build status names the HTTP status only.
func TestRegistryAnswerNotEchoed(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "secret-internal-answer")
	}))
	t.Cleanup(srv.Close)
	f := newFixture(t, nil)
	(&testRegistry{host: strings.TrimPrefix(srv.URL, "http://")}).allowIn(f)
	bd, err := f.build(t, "team", "failing", Spec{FromImage: strings.TrimPrefix(srv.URL, "http://") + "/x:y"})
	if err == nil || strings.Contains(err.Error(), "secret-internal-answer") || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("build error %v", err)
	}
	if bd.Reason == nil || strings.Contains(bd.Reason.Message, "secret-internal-answer") {
		t.Fatalf("build reason %+v", bd.Reason)
	}
	if logs := f.logs(t, bd.ID); strings.Contains(logs, "secret-internal-answer") {
		t.Fatalf("build log echoes the answer:\n%s", logs)
	}
}

// TestRegistryBlobAnswerNotEchoed: the manifest comes, its blobs fail with
// text; the build names the status only.
func TestRegistryBlobAnswerNotEchoed(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, "", "")
	ref := reg.push(t, "test/tiny:1", tinyRootFS(t), v1.Config{Env: []string{"PATH=/bin"}})
	upstream := "http://" + reg.host
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "secret-blob-answer")
			return
		}
		resp, err := http.Get(upstream + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	f := newFixture(t, nil)
	proxy := &testRegistry{host: strings.TrimPrefix(srv.URL, "http://")}
	proxy.allowIn(f)
	from := proxy.host + strings.TrimPrefix(ref, reg.host)
	bd, err := f.build(t, "team", "blobs", Spec{FromImage: from})
	if err == nil || strings.Contains(err.Error(), "secret-blob-answer") || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("build error %v", err)
	}
	if bd.Reason == nil || strings.Contains(bd.Reason.Message, "secret-blob-answer") {
		t.Fatalf("build reason %+v", bd.Reason)
	}
}

// TestECRExchangeThroughEgress: the ECR token exchange goes through the
// egress dialer like the pull: an ECR endpoint on loopback that the
// operator did not allow is never called.
func TestECRExchangeThroughEgress(t *testing.T) {
	t.Parallel()
	creds := awsauth.Credentials{AccessKeyID: "AKIAWARRENTEST", SecretAccessKey: "s3cret/Key+Example"}
	ecr := awsauthtest.NewECR(t, creds, "eu-west-1", "pw")
	reg := newRegistry(t, "AWS", "pw")
	ref := reg.push(t, "private/ecr:1", tinyRootFS(t), v1.Config{Env: []string{"PATH=/bin"}})
	f := newFixture(t, nil)
	reg.allowIn(f) // the registry, not the ECR endpoint
	auth := &RegistryAuth{ECR: &awsauth.ECR{Credentials: creds, Region: "eu-west-1", Endpoint: ecr.URL, Timeout: 30 * time.Second}}
	_, err := f.build(t, "team", "ecr-refused", Spec{FromImage: ref, RegistryAuth: auth})
	if err == nil || !strings.Contains(err.Error(), "egress policy") {
		t.Fatalf("build with a loopback ECR endpoint: %v", err)
	}
	if ecr.Calls() != 0 {
		t.Fatalf("the ECR endpoint got %d calls", ecr.Calls())
	}
}
