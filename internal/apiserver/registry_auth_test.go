package apiserver

import (
	"testing"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/pkg/client"
)

func TestRegistryAuthOf(t *testing.T) {
	t.Parallel()
	const key = `{"type":"service_account","project_id":"p"}`
	for _, tc := range []struct {
		name string
		in   client.RegistryAuth
		want *builder.RegistryAuth
	}{
		{"registry", client.RegistryAuth{Type: "registry", Username: "alice", Password: "s3cret"}, &builder.RegistryAuth{Username: "alice", Password: "s3cret"}},
		{"no type is registry", client.RegistryAuth{Username: "bob", Password: "pw"}, &builder.RegistryAuth{Username: "bob", Password: "pw"}},
		{"gcp service account key", client.RegistryAuth{Type: "gcp", ServiceAccountJSON: key}, &builder.RegistryAuth{Username: "_json_key", Password: key}},
		{"gcp without a key", client.RegistryAuth{Type: "gcp"}, nil},
		{"aws", client.RegistryAuth{Type: "aws"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := registryAuthOf(&tc.in)
			if tc.want == nil {
				if !errdefs.IsInvalid(err) {
					t.Fatalf("registryAuthOf(%+v) = %+v, %v; want invalid", tc.in, got, err)
				}
				return
			}
			if err != nil || *got != *tc.want {
				t.Fatalf("registryAuthOf(%+v) = %+v, %v; want %+v", tc.in, got, err, *tc.want)
			}
		})
	}
}
