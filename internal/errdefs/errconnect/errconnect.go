// Package errconnect is the one table between Warren's error classes
// (internal/errdefs) and Connect error codes, both directions, for every
// Connect boundary: envd's process and filesystem services and the node
// RPC (internal/node/noderpc). Each class has a code of its own, so a class
// crosses a Connect wire and comes back as itself.
package errconnect

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// codes maps the classes to Connect codes, in errdefs.Classes' order.
var codes = []struct {
	class error
	code  connect.Code
}{
	{errdefs.ErrNotFound, connect.CodeNotFound},
	{errdefs.ErrAlreadyExists, connect.CodeAlreadyExists},
	{errdefs.ErrInvalid, connect.CodeInvalidArgument},
	{errdefs.ErrConflict, connect.CodeFailedPrecondition},
	{errdefs.ErrExhausted, connect.CodeResourceExhausted},
	{errdefs.ErrUnavailable, connect.CodeUnavailable},
	{errdefs.ErrUnsupported, connect.CodeUnimplemented},
	{errdefs.ErrUnauthorized, connect.CodeUnauthenticated},
	{errdefs.ErrForbidden, connect.CodePermissionDenied},
}

// Code returns the Connect code of err's class: a Connect error keeps its
// own, a context's end is DeadlineExceeded or Canceled, no class is
// Internal.
func Code(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	for _, c := range codes {
		if errors.Is(err, c.class) {
			return c.code
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	}
	return connect.CodeInternal
}

// Class returns the error class of a Connect code, nil for a code of no
// class (Internal, Unknown, Canceled, ...).
func Class(code connect.Code) error {
	for _, c := range codes {
		if c.code == code {
			return c.class
		}
	}
	return nil
}

// New returns a Connect error of class's code whose message is msg, for a
// server's own refusal (an interceptor's, a stream's end).
func New(class error, msg string) *connect.Error {
	return connect.NewError(Code(class), errors.New(msg))
}

// From wraps err as a Connect error with the code of its class (a Connect
// error stays as it is) and, as the message, the one chosen where err was
// made, else err's whole text (errdefs.MessageOrText). envd uses it: what envd
// reports is about the tenant's own sandbox (its files, its processes),
// so its errors' text is theirs to see; envd makes its errors of a class
// with errdefs.Classf, whose text carries no class words, so nothing is
// cut off any text here.
func From(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(Code(err), errors.New(errdefs.MessageOrText(err)))
}
