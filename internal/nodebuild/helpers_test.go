package nodebuild_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/api/node/nodepbconnect"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeauth"
	"github.com/warren-sandbox/warren/internal/nodebuild"
)

// token is the control plane's credential on every test node's calls,
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
func grantTo(addr, buildID string) *nodepb.BuildHolder {
	return &nodepb.BuildHolder{Address: addr, Grant: nodeauth.Grant(pullKey, buildID, "puller", time.Now().Add(nodeauth.GrantTTL))}
}

// headers sets the headers h on every call of a client.
func headers(h map[string]string) connect.ClientOption {
	set := func(hd http.Header) {
		for k, v := range h {
			hd.Set(k, v)
		}
	}
	return connect.WithInterceptors(&headerInterceptor{set: set})
}

type headerInterceptor struct{ set func(http.Header) }

func (i *headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		i.set(req.Header())
		return next(ctx, req)
	}
}

func (i *headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		i.set(conn.RequestHeader())
		return conn
	}
}

func (i *headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func bearer(tok string) map[string]string {
	if tok == "" {
		return nil
	}
	return map[string]string{"Authorization": "Bearer " + tok}
}

// buildClient is a client of the BuildService at url whose calls carry h.
func buildClient(url string, h map[string]string) nodepbconnect.BuildServiceClient {
	return nodepbconnect.NewBuildServiceClient(http.DefaultClient, url, headers(h))
}

// pull reads the whole artifact kind of build id from the node at url
// with the headers h: its announced digest and its bytes.
func pull(url string, h map[string]string, id string, kind nodepb.ArtifactKind) (*nodepb.Artifact, []byte, error) {
	stream, err := buildClient(url, h).PullArtifact(context.Background(), connect.NewRequest(&nodepb.PullArtifactRequest{BuildId: id, Kind: kind}))
	if err != nil {
		return nil, nil, err
	}
	defer stream.Close()
	var d *nodepb.Artifact
	var data bytes.Buffer
	for stream.Receive() {
		if a := stream.Msg().GetArtifact(); a != nil {
			d = a
		}
		data.Write(stream.Msg().GetData())
	}
	return d, data.Bytes(), stream.Err()
}

// status is build id as the node at url reports it to the credential tok.
func status(url, tok, id string) (*nodepb.BuildStatusResponse, error) {
	resp, err := buildClient(url, bearer(tok)).BuildStatus(context.Background(), connect.NewRequest(&nodepb.BuildStatusRequest{BuildId: id}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// locateAt asks the control plane at url about build id with the token
// tok.
func locateAt(url, tok, id string) (*nodepb.BuildSource, error) {
	c := nodepbconnect.NewControlPlaneServiceClient(http.DefaultClient, url, headers(bearer(tok)))
	resp, err := c.LocateBuild(context.Background(), connect.NewRequest(&nodepb.LocateBuildRequest{BuildId: id}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetSource(), nil
}

// wantCode fails unless err is a Connect error of code.
func wantCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Errorf("%s: %v, want %s", what, err, code)
	}
}

// fakeHolder is a node's BuildService that serves, for PullArtifact,
// what serve makes of the request (the digest it announces and the
// bytes it streams); it answers nothing else.
type fakeHolder struct {
	nodepbconnect.UnimplementedBuildServiceHandler
	serve func(req *nodepb.PullArtifactRequest) (*nodepb.Artifact, []byte, error)
}

func (f *fakeHolder) PullArtifact(_ context.Context, req *connect.Request[nodepb.PullArtifactRequest], stream *connect.ServerStream[nodepb.ArtifactChunk]) error {
	d, data, err := f.serve(req.Msg)
	if err != nil {
		return err
	}
	if err := stream.Send(&nodepb.ArtifactChunk{Artifact: d}); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), 64<<10)
		if err := stream.Send(&nodepb.ArtifactChunk{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// serveHolder serves f over HTTP.
func serveHolder(t *testing.T, f *fakeHolder) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(nodepbconnect.NewBuildServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// servesBytes is a holder whose artifact is art, announced with its own
// digest.
func servesBytes(t *testing.T, art []byte) *httptest.Server {
	sum := sha256.Sum256(art)
	return serveHolder(t, &fakeHolder{serve: func(*nodepb.PullArtifactRequest) (*nodepb.Artifact, []byte, error) {
		return &nodepb.Artifact{Sha256: hex.EncodeToString(sum[:]), Size: int64(len(art))}, art, nil
	}})
}

// tampering is a holder that serves the artifacts of the real holder at
// url, announced as the real holder announces them, with the bytes of
// artifact kind changed by tamper.
func tampering(t *testing.T, url string, kind nodepb.ArtifactKind, tamper func([]byte) []byte) *httptest.Server {
	return serveHolder(t, &fakeHolder{serve: func(req *nodepb.PullArtifactRequest) (*nodepb.Artifact, []byte, error) {
		d, data, err := pull(url, bearer(token), req.GetBuildId(), req.GetKind())
		if err != nil {
			return nil, nil, err
		}
		if req.GetKind() == kind {
			data = tamper(data)
		}
		return d, data, nil
	}})
}

// artifactKind is the kind of artifact r, a PullArtifact call of
// Connect's protocol, asks for (unspecified for another call); r's body
// is left to be read again.
func artifactKind(r *http.Request) nodepb.ArtifactKind {
	if !strings.HasSuffix(r.URL.Path, "/PullArtifact") {
		return nodepb.ArtifactKind_ARTIFACT_KIND_UNSPECIFIED
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req nodepb.PullArtifactRequest
	if err != nil || len(body) < 5 || proto.Unmarshal(body[5:], &req) != nil {
		return nodepb.ArtifactKind_ARTIFACT_KIND_UNSPECIFIED
	}
	return req.GetKind()
}

// isCode reports whether err is a Connect error of code.
func isCode(err error, code connect.Code) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && ce.Code() == code
}

// procedures are the BuildService's methods, from its descriptor: a test
// over them covers a method added later too.
func procedures() []protoreflect.MethodDescriptor {
	sd := nodepb.File_build_proto.Services().ByName("BuildService")
	var out []protoreflect.MethodDescriptor
	for i := range sd.Methods().Len() {
		out = append(out, sd.Methods().Get(i))
	}
	return out
}

// callRaw calls method md of the service at url with an empty request
// (every field unset) and the headers h, and returns the code it ends
// with (0: none).
func callRaw(t *testing.T, url string, md protoreflect.MethodDescriptor, h map[string]string) connect.Code {
	t.Helper()
	proc := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
	c := connect.NewClient[emptypb.Empty, emptypb.Empty](http.DefaultClient, url+proc, headers(h))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	switch {
	case md.IsStreamingClient():
		s := c.CallClientStream(ctx)
		s.Send(&emptypb.Empty{}) // the answer says
		_, err = s.CloseAndReceive()
	case md.IsStreamingServer():
		var s *connect.ServerStreamForClient[emptypb.Empty]
		if s, err = c.CallServerStream(ctx, connect.NewRequest(&emptypb.Empty{})); err == nil {
			for s.Receive() {
			}
			err = s.Err()
			s.Close()
		}
	default:
		_, err = c.CallUnary(ctx, connect.NewRequest(&emptypb.Empty{}))
	}
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}
