package apiserver

import (
	"reflect"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/awsauth"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/pkg/client"
)

func TestRegistryAuthOf(t *testing.T) {
	t.Parallel()
	const key = `{"type":"service_account","project_id":"p"}`
	aws := func(key, secret, region string) client.RegistryAuth {
		return client.RegistryAuth{Type: "aws", AWSAccessKeyID: key, AWSSecretAccessKey: secret, AWSRegion: region}
	}
	for _, tc := range []struct {
		name string
		in   client.RegistryAuth
		want *builder.RegistryAuth
		// field is the field an invalid input is blamed on.
		field string
	}{
		{"registry", client.RegistryAuth{Type: "registry", Username: "alice", Password: "s3cret"}, &builder.RegistryAuth{Username: "alice", Password: "s3cret"}, ""},
		{"no type is registry", client.RegistryAuth{Username: "bob", Password: "pw"}, &builder.RegistryAuth{Username: "bob", Password: "pw"}, ""},
		{"gcp service account key", client.RegistryAuth{Type: "gcp", ServiceAccountJSON: key}, &builder.RegistryAuth{Username: "_json_key", Password: key}, ""},
		{"gcp without a key", client.RegistryAuth{Type: "gcp"}, nil, "serviceAccountJson"},
		{"aws keys and region", aws("AKIAEXAMPLE", "secret", "eu-west-1"), &builder.RegistryAuth{ECR: &awsauth.ECR{
			Credentials: awsauth.Credentials{AccessKeyID: "AKIAEXAMPLE", SecretAccessKey: "secret"}, Region: "eu-west-1",
		}}, ""},
		{"aws without anything", client.RegistryAuth{Type: "aws"}, nil, "awsAccessKeyId"},
		{"aws without a secret", aws("AKIAEXAMPLE", "", "eu-west-1"), nil, "awsSecretAccessKey"},
		{"aws without a region", aws("AKIAEXAMPLE", "secret", ""), nil, "awsRegion"},
		{"aws region that is a host", aws("AKIAEXAMPLE", "secret", "evil.example.com#"), nil, "awsRegion"},
		{"unknown type", client.RegistryAuth{Type: "azure"}, nil, "type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := registryAuthOf(&tc.in)
			if tc.want == nil {
				if !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), "fromImageRegistry."+tc.field) {
					t.Fatalf("registryAuthOf(%+v) = %+v, %v; want invalid fromImageRegistry.%s", tc.in, got, err, tc.field)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("registryAuthOf(%+v) = %+v, %v; want %+v", tc.in, got, err, *tc.want)
			}
		})
	}
}
