// Package errdefs defines the handful of error classes that Warren maps to
// wire codes at its boundaries: HTTP in errdefs/errhttp, Connect in
// errdefs/errconnect, one table each, both directions.
//
// Code deep inside Warren wraps one of the sentinel errors once, naming the
// object it concerns:
//
//	return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
//
// and the boundary (API server, RPC handler) asks which class an error
// belongs to with errors.Is, or with the helpers below, to choose a code.
//
// What a client sees is apart from what the log gets (tailscale's
// HTTPError{Msg, Err}): an error's text is for the log only, and a client
// is told the message chosen where the error was made, with Publicf (the
// text names only what the caller may see) or WithMessage (a message for
// an error whose text may not be shown), or by an error type of its own
// that implements Public. An error without one tells a client its class
// only ("not found", "internal error"): no boundary cuts a client message
// out of an error's text.
package errdefs

import (
	"errors"
	"fmt"
	"strings"
)

// The error classes. Wrap these; never compare error strings.
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	ErrInvalid       = errors.New("invalid argument")
	ErrConflict      = errors.New("conflict")
	ErrExhausted     = errors.New("resource exhausted")
	ErrUnavailable   = errors.New("unavailable")
	ErrUnsupported   = errors.New("not supported")
	ErrUnauthorized  = errors.New("unauthorized")
	ErrForbidden     = errors.New("forbidden")
)

// Classes are the error classes, in the order Class tests them. Every wire
// table (errhttp, errconnect) has a row for each, and a test round-trips
// each through it.
func Classes() []error {
	return []error{
		ErrNotFound, ErrAlreadyExists, ErrInvalid, ErrConflict, ErrExhausted,
		ErrUnavailable, ErrUnsupported, ErrUnauthorized, ErrForbidden,
	}
}

// IsNotFound reports whether err is of the not-found class.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsAlreadyExists reports whether err is of the already-exists class.
func IsAlreadyExists(err error) bool { return errors.Is(err, ErrAlreadyExists) }

// IsInvalid reports whether err is of the invalid-argument class.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// IsConflict reports whether err is of the conflict class.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsExhausted reports whether err is of the resource-exhausted class.
func IsExhausted(err error) bool { return errors.Is(err, ErrExhausted) }

// IsUnavailable reports whether err is of the unavailable class.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// IsUnsupported reports whether err is of the not-supported class.
func IsUnsupported(err error) bool { return errors.Is(err, ErrUnsupported) }

// IsUnauthorized reports whether err is of the unauthorized class.
func IsUnauthorized(err error) bool { return errors.Is(err, ErrUnauthorized) }

// IsForbidden reports whether err is of the forbidden class.
func IsForbidden(err error) bool { return errors.Is(err, ErrForbidden) }

// Class returns the class err belongs to, or nil.
func Class(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range Classes() {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// Public is implemented by an error that carries what a client may be told
// of it, chosen where the error was made (publicError below,
// lifecycle.LimitError, errhttp.HTTPError).
type Public interface {
	error
	PublicMessage() string
}

// Message returns the message a client may be told of err: the one of the
// outermost Public error in its chain, to its first line. ok is false when
// err carries none (or an empty one); the client is then told err's class
// only.
func Message(err error) (msg string, ok bool) {
	var p Public
	if err == nil || !errors.As(err, &p) {
		return "", false
	}
	msg = firstLine(p.PublicMessage())
	return msg, msg != ""
}

// publicError is an error with a message for clients apart from its detail.
type publicError struct {
	msg string
	err error
}

func (e *publicError) Error() string         { return e.msg + ": " + e.err.Error() }
func (e *publicError) Unwrap() error         { return e.err }
func (e *publicError) PublicMessage() string { return e.msg }

// WithMessage returns err with msg as what a client is told of it; err keeps
// its class, and its text goes to the log only. A nil err stays nil.
func WithMessage(err error, msg string) error {
	if err == nil {
		return nil
	}
	return &publicError{msg: msg, err: err}
}

// Publicf returns an error of class whose formatted text is fit for a client
// as it is (it names only what the caller may see), e.g.
//
//	errdefs.Publicf(errdefs.ErrUnavailable, "sandbox %q is pausing", id)
//
// Its Error() is the text followed by ": " and the class, as
// fmt.Errorf("...: %w", class) would give.
func Publicf(class error, format string, args ...any) error {
	return &publicError{msg: fmt.Sprintf(format, args...), err: class}
}

// Wrapf returns err with a context before it, as
// fmt.Errorf(format+": %w", args..., err) would; when err carries a public
// message (Message), the same context goes before that message too. Use
// it where the context is as fit for a client as the message (a step's
// number, an ID the caller gave).
func Wrapf(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	ctx := fmt.Sprintf(format, args...)
	if msg, ok := Message(err); ok {
		return &contextError{ctx: ctx, msg: msg, err: err}
	}
	return fmt.Errorf("%s: %w", ctx, err)
}

// contextError is a public error with a context before its text and its
// message.
type contextError struct {
	ctx, msg string
	err      error
}

func (e *contextError) Error() string         { return e.ctx + ": " + e.err.Error() }
func (e *contextError) Unwrap() error         { return e.err }
func (e *contextError) PublicMessage() string { return e.ctx + ": " + e.msg }

// MessageOrText is Message(err) when err carries one, else err's whole
// text. It is for envd's wires only (errconnect.From, envd's file
// routes), whose client is the tenant of the sandbox envd runs in: what
// envd's errors say is about the tenant's own files and processes, and
// envd makes its errors of a class with Classf, whose text carries no
// class words. Every other boundary tells a client errhttp.Message.
func MessageOrText(err error) string {
	if err == nil {
		return ""
	}
	if msg, ok := Message(err); ok {
		return msg
	}
	return err.Error()
}

// Classf returns fmt.Errorf(format, args...) as an error of class: it is
// errors.Is class (and whatever %w wraps), and its text is the formatted
// text alone, without the class's words. It is for a wire whose clients
// see an error's whole text (envd's, about the tenant's own sandbox:
// errconnect.From); elsewhere a client is told its class only.
func Classf(class error, format string, args ...any) error {
	return &classError{err: fmt.Errorf(format, args...), class: class}
}

// classError is an error put in a class without its text saying so.
type classError struct{ err, class error }

func (e *classError) Error() string   { return e.err.Error() }
func (e *classError) Unwrap() []error { return []error{e.err, e.class} }

// firstLine is s up to its first line break.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(s)
}
