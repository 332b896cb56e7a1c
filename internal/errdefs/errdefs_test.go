package errdefs

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
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

func TestClientMessage(t *testing.T) {
	t.Parallel()
	host := errors.New("runsc: exit status 1: open /var/lib/wstr/secret/config.json: permission denied\ngoroutine 1 [running]")
	cases := []struct {
		name     string
		err      error
		want     string
		internal bool
	}{
		{"nil", nil, "", false},
		{"not found names the object", fmt.Errorf("sandbox %q: %w", "x", ErrNotFound), `sandbox "x"`, false},
		{"invalid, first line only", fmt.Errorf("field 'a': bad\nsecond line: %w", ErrInvalid), "field 'a': bad", true},
		{"unsupported", fmt.Errorf("pause with memory: driver fake cannot checkpoint: %w", ErrUnsupported), "pause with memory: driver fake cannot checkpoint", false},
		{"unavailable hides the host error", fmt.Errorf("create %q: %w: %w", "x", host, ErrUnavailable), "service unavailable", true},
		{"joined unavailable hides it too", fmt.Errorf("unpack: %w", errors.Join(ErrUnavailable, host)), "service unavailable", true},
		{"no class is internal", fmt.Errorf("sandbox %q: %w", "x", host), "internal error", true},
		{"with message", WithMessage(fmt.Errorf("create: %w: %w", host, ErrUnavailable), "no node could start the sandbox"), "no node could start the sandbox", true},
		{"publicf", Publicf(ErrUnavailable, "sandbox %q is %s", "x", "pausing"), `sandbox "x" is pausing`, false},
		{"wrapped publicf keeps its message", fmt.Errorf("route: %w", Publicf(ErrConflict, "sandbox %q is busy", "x")), `sandbox "x" is busy`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := ClientMessage(c.err)
			if got != c.want {
				t.Fatalf("ClientMessage = %q, want %q", got, c.want)
			}
			if strings.Contains(got, "wstr") || strings.Contains(got, "goroutine") {
				t.Fatalf("ClientMessage %q carries the host error", got)
			}
			if c.err != nil && Internal(c.err) != c.internal {
				t.Fatalf("Internal = %t, want %t", !c.internal, c.internal)
			}
		})
	}
	// The class survives a message: the status still comes from it.
	if HTTPStatus(Publicf(ErrUnavailable, "busy")) != http.StatusServiceUnavailable {
		t.Fatal("Publicf lost its class")
	}
	if !strings.Contains(WithMessage(host, "m").Error(), "permission denied") {
		t.Fatal("WithMessage lost the detail the log needs")
	}
}

func TestStripClass(t *testing.T) {
	t.Parallel()
	if got := StripClass(fmt.Errorf("a: %w", fmt.Errorf("b: %w", ErrConflict))); got != "a: b" {
		t.Fatalf("StripClass = %q", got)
	}
	if got := StripClass(errors.New("plain")); got != "plain" {
		t.Fatalf("StripClass = %q", got)
	}
	if Class(fmt.Errorf("x: %w", ErrForbidden)) != ErrForbidden || Class(errors.New("y")) != nil {
		t.Fatal("Class")
	}
}
