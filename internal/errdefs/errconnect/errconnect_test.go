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
		{fmt.Errorf("process with pid 7 not found: %w", errdefs.ErrNotFound), connect.CodeNotFound, "process with pid 7 not found"},
		{fmt.Errorf("directory already exists: /x: %w", errdefs.ErrAlreadyExists), connect.CodeAlreadyExists, "directory already exists: /x"},
		{fmt.Errorf("cwd: %w", errdefs.ErrInvalid), connect.CodeInvalidArgument, "cwd"},
		{fmt.Errorf("user: %w", errdefs.ErrUnauthorized), connect.CodeUnauthenticated, "user"},
		{fmt.Errorf("path: %w", errdefs.ErrForbidden), connect.CodePermissionDenied, "path"},
		{fmt.Errorf("stdin closed: %w", errdefs.ErrConflict), connect.CodeFailedPrecondition, "stdin closed"},
		{context.DeadlineExceeded, connect.CodeDeadlineExceeded, "context deadline exceeded"},
		{errors.New("boom"), connect.CodeInternal, "boom"},
		{connect.NewError(connect.CodeAborted, errors.New("as is")), connect.CodeAborted, "as is"},
	}
	for _, tc := range cases {
		t.Run(tc.msg, func(t *testing.T) {
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

// Every class crosses a Connect wire and comes back as itself.
func TestClassRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range codes {
		err := fmt.Errorf("sandbox %q: %w", "x", c.class)
		if got := Class(Code(err)); got != c.class {
			t.Errorf("Class(Code(%v)) = %v", err, got)
		}
	}
	if Class(connect.CodeInternal) != nil || Class(connect.CodeUnknown) != nil {
		t.Fatal("a code of no class has a class")
	}
}
