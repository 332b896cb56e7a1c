package errdefs

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
)

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want int
	}{
		{nil, http.StatusOK},
		{fmt.Errorf("sandbox %q: %w", "x", ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", ErrConflict)), http.StatusConflict},
		{ErrAlreadyExists, http.StatusConflict},
		{ErrInvalid, http.StatusBadRequest},
		{ErrExhausted, http.StatusTooManyRequests},
		{ErrUnavailable, http.StatusServiceUnavailable},
		{ErrUnsupported, http.StatusNotImplemented},
		{ErrUnauthorized, http.StatusUnauthorized},
		{ErrForbidden, http.StatusForbidden},
		{errors.New("disk on fire"), http.StatusInternalServerError},
	}
	for _, c := range cases {
		if got := HTTPStatus(c.err); got != c.want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestClassHelpers(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("template %q: %w", "base", ErrNotFound)
	if !IsNotFound(err) || IsConflict(err) || IsInvalid(err) {
		t.Fatalf("class helpers disagree for %v", err)
	}
	if !IsExhausted(fmt.Errorf("pause: %w", ErrExhausted)) {
		t.Fatal("IsExhausted false for a wrapped ErrExhausted")
	}
}
