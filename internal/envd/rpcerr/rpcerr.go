// Package rpcerr maps Warren's error classes (internal/errdefs) to Connect
// error codes at envd's RPC boundary.
package rpcerr

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Code returns the Connect code of err's class.
func Code(err error) connect.Code {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce.Code()
	case errors.Is(err, errdefs.ErrNotFound):
		return connect.CodeNotFound
	case errors.Is(err, errdefs.ErrAlreadyExists):
		return connect.CodeAlreadyExists
	case errors.Is(err, errdefs.ErrInvalid):
		return connect.CodeInvalidArgument
	case errors.Is(err, errdefs.ErrConflict):
		return connect.CodeFailedPrecondition
	case errors.Is(err, errdefs.ErrExhausted):
		return connect.CodeResourceExhausted
	case errors.Is(err, errdefs.ErrUnavailable):
		return connect.CodeUnavailable
	case errors.Is(err, errdefs.ErrUnsupported):
		return connect.CodeUnimplemented
	case errors.Is(err, errdefs.ErrUnauthorized):
		return connect.CodeUnauthenticated
	case errors.Is(err, errdefs.ErrForbidden):
		return connect.CodePermissionDenied
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	default:
		return connect.CodeInternal
	}
}

// From wraps err as a Connect error with the code of its class. The message
// is err's text; wrap errors so that it names the object and reveals no
// more than the caller may see.
func From(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(Code(err), errors.New(Message(err)))
}

var classes = []error{
	errdefs.ErrNotFound, errdefs.ErrAlreadyExists, errdefs.ErrInvalid, errdefs.ErrConflict,
	errdefs.ErrExhausted, errdefs.ErrUnavailable, errdefs.ErrUnsupported, errdefs.ErrUnauthorized,
	errdefs.ErrForbidden,
}

// Message returns err's text without the trailing ": <class>" that wrapping
// an errdefs class adds, e.g. "process with pid 7 not found".
func Message(err error) string {
	msg := err.Error()
	for _, c := range classes {
		if t, ok := strings.CutSuffix(msg, ": "+c.Error()); ok {
			return t
		}
	}
	return msg
}
