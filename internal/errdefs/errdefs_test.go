package errdefs

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

func TestClassHelpers(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("template %q: %w", "base", ErrNotFound)
	if !IsNotFound(err) || IsConflict(err) || IsInvalid(err) {
		t.Fatalf("class helpers disagree for %v", err)
	}
	if !IsExhausted(fmt.Errorf("pause: %w", ErrExhausted)) {
		t.Fatal("IsExhausted false for a wrapped ErrExhausted")
	}
	for _, c := range Classes() {
		if got := Class(fmt.Errorf("x: %w", c)); got != c {
			t.Errorf("Class of a wrapped %v = %v", c, got)
		}
	}
	if Class(errors.New("y")) != nil || Class(nil) != nil {
		t.Fatal("an error of no class has one")
	}
}

// limitError is a typed error that carries its own public message, as
// lifecycle.LimitError does.
type limitError struct{ n int }

func (e *limitError) Error() string         { return fmt.Sprintf("limit %d (internal detail)", e.n) }
func (e *limitError) PublicMessage() string { return fmt.Sprintf("at most %d", e.n) }
func (e *limitError) Unwrap() error         { return ErrExhausted }

func TestMessage(t *testing.T) {
	t.Parallel()
	host := errors.New("runsc: exit status 1: open /var/lib/wstr/secret/config.json: permission denied\ngoroutine 1 [running]")
	cases := []struct {
		name string
		err  error
		want string
		ok   bool
	}{
		{"nil", nil, "", false},
		{"a wrapped class carries no message", fmt.Errorf("sandbox %q: %w", "x", ErrNotFound), "", false},
		{"nor does a host error", fmt.Errorf("create %q: %w: %w", "x", host, ErrUnavailable), "", false},
		{"with message", WithMessage(fmt.Errorf("create: %w: %w", host, ErrUnavailable), "no node could start the sandbox"), "no node could start the sandbox", true},
		{"publicf", Publicf(ErrUnavailable, "sandbox %q is %s", "x", "pausing"), `sandbox "x" is pausing`, true},
		{"wrapped publicf keeps its message", fmt.Errorf("route: %w", Publicf(ErrConflict, "sandbox %q is busy", "x")), `sandbox "x" is busy`, true},
		{"the outermost message wins", WithMessage(Publicf(ErrConflict, "inner"), "outer"), "outer", true},
		{"first line only", Publicf(ErrInvalid, "line one\nline two"), "line one", true},
		{"a typed error's own", fmt.Errorf("create: %w", &limitError{3}), "at most 3", true},
		{"wrapf adds its context to the message", Wrapf(Publicf(ErrInvalid, "unsupported step type %q", "X"), "step %d", 2), `step 2: unsupported step type "X"`, true},
		{"wrapf of no message has none", Wrapf(fmt.Errorf("disk: %w", ErrInvalid), "step %d", 2), "", false},
		{"classf is not public", Classf(ErrNotFound, "process %d not found", 7), "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, ok := Message(c.err)
			if got != c.want || ok != c.ok {
				t.Fatalf("Message = %q, %t; want %q, %t", got, ok, c.want, c.ok)
			}
			if strings.Contains(got, "wstr") || strings.Contains(got, "goroutine") {
				t.Fatalf("Message %q carries the host error", got)
			}
		})
	}
	// The class survives a message, and the detail stays for the log.
	if !IsUnavailable(Publicf(ErrUnavailable, "busy")) || !IsExhausted(&limitError{1}) {
		t.Fatal("a public error lost its class")
	}
	if e := WithMessage(host, "m"); !strings.Contains(e.Error(), "permission denied") || !errors.Is(e, host) {
		t.Fatal("WithMessage lost the detail the log needs")
	}
	if got := Publicf(ErrNotFound, "sandbox %q", "x").Error(); got != `sandbox "x": not found` {
		t.Fatalf("Publicf's text for the log = %q", got)
	}
	if got := Wrapf(Publicf(ErrInvalid, "bad"), "step %d", 1).Error(); got != "step 1: bad: invalid argument" {
		t.Fatalf("Wrapf's text for the log = %q", got)
	}
	if WithMessage(nil, "m") != nil || Wrapf(nil, "x") != nil {
		t.Fatal("WithMessage(nil) is not nil")
	}
}

func TestClassf(t *testing.T) {
	t.Parallel()
	os := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}
	err := fmt.Errorf("stat /x: %w", Classf(ErrNotFound, "open: %w", os))
	if !IsNotFound(err) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Classf lost a class or its cause: %v", err)
	}
	if got := err.Error(); got != "stat /x: open: open /x: file does not exist" {
		t.Fatalf("Classf's text = %q (no class words wanted)", got)
	}
}
