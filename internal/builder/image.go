package builder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/warren-sandbox/warren/internal/awsauth"
	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node/layer"
)

// RegistryAuth is how to log in to a registry; nil or empty means
// anonymous. With ECR set, the username and password come from
// exchanging its AWS keys with ECR when the build pulls (Username and
// Password are then ignored).
type RegistryAuth struct {
	Username string
	Password string
	ECR      *awsauth.ECR
}

// basic is the registry's basic auth: as given, or from ECR's token
// exchange over tr (bounded by the ECR's timeout; its failure names the
// image).
func (a *RegistryAuth) basic(ctx context.Context, ref string, tr http.RoundTripper) (user, pass string, err error) {
	if a == nil {
		return "", "", nil
	}
	if a.ECR == nil {
		return a.Username, a.Password, nil
	}
	ecr := *a.ECR
	if ecr.Client == nil {
		ecr.Client = &http.Client{Transport: tr} // through the egress dialer, as the pull
	}
	user, pass, err = ecr.Login(ctx)
	if err != nil {
		return "", "", fmt.Errorf("image %q: %w", ref, err)
	}
	return user, pass, nil
}

// imageConfig is what a build takes from an image's configuration.
type imageConfig struct {
	Env     map[string]string
	User    string
	Workdir string
	Cmd     []string
}

// remoteImage finds ref in its registry.
func (b *Builder) remoteImage(ctx context.Context, ref string, auth *RegistryAuth) (v1.Image, string, error) {
	var opts []name.Option
	if b.insecure(ref) {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, "", fmt.Errorf("image %q: %v: %w", ref, err, errdefs.ErrInvalid)
	}
	user, pass, err := auth.basic(ctx, ref, b.cfg.Transport)
	if err != nil {
		return nil, "", err
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})}
	if user != "" || pass != "" {
		ropts = append(ropts, remote.WithAuth(&authn.Basic{Username: user, Password: pass}))
	} else {
		ropts = append(ropts, remote.WithAuth(authn.Anonymous))
	}
	ropts = append(ropts, remote.WithTransport(b.cfg.Transport))
	img, err := remote.Image(r, ropts...)
	if err != nil {
		b.log.Info("image pull failed", "image", ref, "error", err)
		return nil, "", classifyRegistryError(ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		b.log.Info("image pull failed", "image", ref, "error", err)
		return nil, "", classifyRegistryError(ref, err)
	}
	return img, d.String(), nil
}

func (b *Builder) insecure(ref string) bool {
	for _, reg := range b.cfg.InsecureRegistries {
		if strings.HasPrefix(ref, reg+"/") {
			return true
		}
	}
	return false
}

// classifyRegistryError turns a registry failure into a clear message of
// the right class. The message (in the tenant's build status) names the
// HTTP status or the kind of connection failure, never the text the
// peer answered (other errors, not from the registry, are said as they
// are): the tenant named the registry, and its answer must not
// carry what a refused or failing host says back.
func classifyRegistryError(ref string, err error) error {
	if egress.Refused(err) {
		return fmt.Errorf("image %q: %s: %w", ref, egress.Describe(err), errdefs.ErrForbidden)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("image %q not found in its registry: %w", ref, errdefs.ErrNotFound)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("image %q: the registry refused the credentials (HTTP %d): %w", ref, te.StatusCode, errdefs.ErrUnauthorized)
		}
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
				return fmt.Errorf("image %q not found in its registry: %w", ref, errdefs.ErrNotFound)
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return fmt.Errorf("image %q: the registry refused the credentials: %w", ref, errdefs.ErrUnauthorized)
			}
		}
	}
	if te != nil {
		return fmt.Errorf("image %q: its registry answered HTTP %d: %w", ref, te.StatusCode, errdefs.ErrUnavailable)
	}
	var ue *url.Error
	var ne net.Error
	if errors.As(err, &ue) || errors.As(err, &ne) {
		return fmt.Errorf("image %q: %s: %w", ref, egress.Describe(err), errdefs.ErrUnavailable)
	}
	// Not from the registry or the way to it (a bad layer, a full disk,
	// a limit): said as it is, its class kept.
	if errdefs.Class(err) != nil {
		return fmt.Errorf("image %q: %w", ref, err)
	}
	return fmt.Errorf("image %q: %v: %w", ref, err, errdefs.ErrUnavailable)
}

// readImageConfig extracts the parts of an image's config a build uses.
func readImageConfig(img v1.Image) (imageConfig, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return imageConfig{}, err
	}
	ic := imageConfig{Env: map[string]string{}}
	for _, kv := range cf.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		if k != "" {
			ic.Env[k] = v
		}
	}
	ic.User = cf.Config.User
	ic.Workdir = cf.Config.WorkingDir
	ic.Cmd = append(append([]string{}, cf.Config.Entrypoint...), cf.Config.Cmd...)
	return ic, nil
}

// unpackImage writes the flattened file system of img into dir, within
// opts' limits.
func unpackImage(ctx context.Context, img v1.Image, dir string, opts layer.Options) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	return layer.Unpack(ctx, rc, dir, opts)
}
