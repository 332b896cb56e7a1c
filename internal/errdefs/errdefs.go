// Package errdefs defines the handful of error classes that Warren maps to
// wire codes (HTTP, Connect) at its boundaries.
//
// Code deep inside Warren wraps one of the sentinel errors once, naming the
// object it concerns:
//
//	return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
//
// and the boundary (API server, RPC handler) asks which class an error belongs
// to with errors.Is, or with the helpers below, to choose a status code.
//
// What a client sees is apart from what the log gets (tailscale's
// HTTPError{Msg, Err}): ClientMessage is the one-line text a client may be
// told, the error's whole text is for the log. Errors of the client-side
// classes (not found, invalid, conflict, ...) are written by Warren's own code
// to name what the caller asked for, so their first line is the message; an
// unavailable or unclassified error may carry host paths and a runtime's
// stderr, so a client is told only its class unless the code that made it
// gave a message with WithMessage or Publicf.
package errdefs

import (
	"errors"
	"fmt"
	"net/http"
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

// HTTPStatus maps an error to the HTTP status of its class; errors of no
// class are internal errors (500).
func HTTPStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrAlreadyExists), errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrExhausted):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	default:
		return http.StatusInternalServerError
	}
}

// classes are the error classes, in the order the helpers test them.
var classes = []error{
	ErrNotFound, ErrAlreadyExists, ErrInvalid, ErrConflict, ErrExhausted,
	ErrUnavailable, ErrUnsupported, ErrUnauthorized, ErrForbidden,
}

// publicError is an error with a message for clients apart from its detail.
type publicError struct {
	msg string
	err error
}

func (e *publicError) Error() string { return e.msg + ": " + e.err.Error() }
func (e *publicError) Unwrap() error { return e.err }

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
func Publicf(class error, format string, args ...any) error {
	return &publicError{msg: fmt.Sprintf(format, args...), err: class}
}

// ClientMessage is what a client may be told of err, one line:
//   - the message given with WithMessage or Publicf, if any;
//   - for an error of a client-side class (not found, already exists,
//     invalid, conflict, exhausted, not supported, unauthorized, forbidden):
//     its first line without the trailing class words (StripClass);
//   - otherwise (unavailable, no class) the class alone: "service
//     unavailable" or "internal error". The caller logs err.
func ClientMessage(err error) string {
	if err == nil {
		return ""
	}
	var pe *publicError
	if errors.As(err, &pe) {
		return firstLine(pe.msg)
	}
	switch {
	case errors.Is(err, ErrUnavailable):
		return "service unavailable"
	case Class(err) == nil:
		return "internal error"
	}
	return firstLine(StripClass(err))
}

// Internal reports whether a client is told less of err than its text
// says (ClientMessage hides some detail), so that the boundary logs err.
func Internal(err error) bool {
	return err != nil && ClientMessage(err) != strings.TrimSpace(StripClass(err))
}

// Class returns the class err belongs to, or nil.
func Class(err error) error {
	for _, c := range classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// StripClass returns err's text without the trailing ": <class>" that
// wrapping a class adds, e.g. `sandbox "x"` for
// fmt.Errorf("sandbox %q: %w", "x", ErrNotFound): the status code already
// says the class.
func StripClass(err error) string {
	msg := err.Error()
	for _, c := range classes {
		if t, ok := strings.CutSuffix(msg, ": "+c.Error()); ok {
			return t
		}
	}
	return msg
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(s)
}
