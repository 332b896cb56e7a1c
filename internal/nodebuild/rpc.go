package nodebuild

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errconnect"
	"github.com/warren-sandbox/warren/internal/node/noderpc"
)

// The build wire's Connect plumbing, shared by its two services
// (BuildService on the nodes, ControlPlaneService on the control plane):
// errors both ways through errconnect, the refusal of fields the wire
// does not know, and the bearer of the calls.

// maxRequestBytes bounds one message a handler reads (a start's spec,
// one chunk of a stream); maxAnswerBytes one a client reads (a build's
// status carries its whole log from an offset: a build's log is bounded
// by the builder's Limits.LogBytes, 8 MiB of text by default).
const (
	maxRequestBytes = 8 << 20
	maxAnswerBytes  = 64 << 20
)

// chunkSize is the size of the data messages of the wire's streams.
const chunkSize = 256 << 10

// rpcError is err as the wire carries it: the Connect code of its class
// (errconnect; a Connect error stays as it is), its text for the peer's
// log and, when err carries the message a client may be told
// (errdefs.Message), that message as a PublicMessage detail. Nothing a
// client sees is made from the text.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	ce = connect.NewError(errconnect.Code(err), err)
	noderpc.AddPublicDetail(ce, err)
	return ce
}

// wireError is a peer's answer in Warren's classes: the class of its code
// (errconnect.Class), the peer's text (for the log) and, when the peer
// sent one, the message a client may be told of it.
type wireError struct {
	msg   string
	class error
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.class }

// fromRPC turns a peer's Connect error into Warren's classes. A code of
// no class (the peer failed, or could not be reached) is ErrUnavailable:
// the call may go to another peer.
func fromRPC(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	class := errconnect.Class(ce.Code())
	if class == nil {
		class = errdefs.ErrUnavailable
	}
	out := error(&wireError{msg: fmt.Sprintf("%s: %s", ce.Code(), ce.Message()), class: class})
	if pm := noderpc.PublicDetail(ce); pm != "" {
		return errdefs.WithMessage(out, pm)
	}
	return out
}

// known refuses a message that holds a field the wire does not know, at
// any depth (ErrInvalid): an older peer's path is an error, not dropped.
func known(m proto.Message) error {
	if m == nil {
		return nil
	}
	if name, ok := unknownField(m.ProtoReflect()); ok {
		return errdefs.Publicf(errdefs.ErrInvalid, "%s holds a field the build wire does not know", name)
	}
	return nil
}

// unknownField names the message of m, or one within it, that holds
// unknown fields.
func unknownField(m protoreflect.Message) (string, bool) {
	if len(m.GetUnknown()) > 0 {
		return string(m.Descriptor().Name()), true
	}
	var name string
	var found bool
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				name, found = unknownField(mv.Message())
				return !found
			})
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len() && !found; i++ {
				name, found = unknownField(v.List().Get(i).Message())
			}
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			name, found = unknownField(v.Message())
		}
		return !found
	})
	return name, found
}

// knownFields is an interceptor that refuses a unary request holding a
// field the wire does not know (streams check each message they read).
var knownFields = connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if m, ok := req.Any().(proto.Message); ok {
			if err := known(m); err != nil {
				return nil, rpcError(err)
			}
		}
		return next(ctx, req)
	}
})

// strictJSON is Connect's JSON codec refusing unknown fields (Connect's
// own drops them), so that a JSON request is held to the same rule as a
// binary one.
type strictJSON struct{ name string }

func (c strictJSON) Name() string { return c.name }

func (c strictJSON) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.Marshal(pm)
}

func (c strictJSON) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.UnmarshalOptions{}.Unmarshal(b, pm)
}

// handlerOptions are the options of the wire's handlers: the bound on a
// message, the strict JSON codecs, and the interceptors: auth (when set)
// first, then the refusal of unknown fields.
func handlerOptions(auth connect.Interceptor) []connect.HandlerOption {
	ics := []connect.Interceptor{knownFields}
	if auth != nil {
		ics = append([]connect.Interceptor{auth}, ics...)
	}
	return []connect.HandlerOption{
		connect.WithReadMaxBytes(maxRequestBytes),
		connect.WithCodec(strictJSON{"json"}), connect.WithCodec(strictJSON{"json; charset=utf-8"}),
		connect.WithInterceptors(ics...),
	}
}

// bearer sets the headers of every call a client makes: its bearer
// token, and a pull grant (nodeauth.HeaderGrant) when set.
type bearer struct {
	token, grantHeader, grant string
}

func (b bearer) set(h http.Header) {
	if b.token != "" {
		h.Set("Authorization", "Bearer "+b.token)
	}
	if b.grant != "" {
		h.Set(b.grantHeader, b.grant)
	}
}

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		b.set(req.Header())
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		b.set(conn.RequestHeader())
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// clientOptions are the options of the wire's clients, with the
// headers b.
func clientOptions(b bearer) []connect.ClientOption {
	return []connect.ClientOption{connect.WithReadMaxBytes(maxAnswerBytes), connect.WithInterceptors(b)}
}
