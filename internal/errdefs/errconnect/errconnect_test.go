package errconnect

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func TestFrom(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		code connect.Code
		msg  string
	}{
		{errdefs.Classf(errdefs.ErrNotFound, "process with pid 7 not found"), connect.CodeNotFound, "process with pid 7 not found"},
		{fmt.Errorf("mkdir: %w", errdefs.Classf(errdefs.ErrAlreadyExists, "directory already exists: /x")), connect.CodeAlreadyExists, "mkdir: directory already exists: /x"},
		{errdefs.Classf(errdefs.ErrInvalid, "cwd"), connect.CodeInvalidArgument, "cwd"},
		{errdefs.Publicf(errdefs.ErrUnauthorized, "user"), connect.CodeUnauthenticated, "user"},
		{fmt.Errorf("path: %w", errdefs.Classf(errdefs.ErrForbidden, "denied")), connect.CodePermissionDenied, "path: denied"},
		{errdefs.Classf(errdefs.ErrConflict, "stdin closed"), connect.CodeFailedPrecondition, "stdin closed"},
		{context.DeadlineExceeded, connect.CodeDeadlineExceeded, "context deadline exceeded"},
		{errors.New("boom"), connect.CodeInternal, "boom"},
		{connect.NewError(connect.CodeAborted, errors.New("as is")), connect.CodeAborted, "as is"},
		{New(errdefs.ErrUnavailable, "watch ended"), connect.CodeUnavailable, "watch ended"},
	}
	for _, tc := range cases {
		t.Run(tc.msg, func(t *testing.T) {
			t.Parallel()
			var ce *connect.Error
			if !errors.As(From(tc.err), &ce) || ce.Code() != tc.code || ce.Message() != tc.msg {
				t.Fatalf("got %v, want %v %q", From(tc.err), tc.code, tc.msg)
			}
		})
	}
	if From(nil) != nil {
		t.Fatal("nil")
	}
}

// Every class crosses a Connect wire and comes back as itself: each has a
// code of its own.
func TestClassRoundTrip(t *testing.T) {
	t.Parallel()
	seen := map[connect.Code]error{}
	for _, class := range errdefs.Classes() {
		err := fmt.Errorf("sandbox %q: %w", "x", class)
		code := Code(err)
		if prev, dup := seen[code]; dup {
			t.Errorf("%v and %v share %v", prev, class, code)
		}
		seen[code] = class
		wire := connect.NewError(code, errors.New(err.Error()))
		if got := Class(connect.CodeOf(wire)); got != class {
			t.Errorf("Class(Code(%v)) = %v", err, got)
		}
	}
	if Class(connect.CodeInternal) != nil || Class(connect.CodeUnknown) != nil || Code(errors.New("x")) != connect.CodeInternal {
		t.Fatal("a code of no class has a class")
	}
}
