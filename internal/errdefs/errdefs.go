// Package errdefs defines the handful of error classes that Warren maps to
// wire codes (HTTP, Connect) at its boundaries.
//
// Code deep inside Warren wraps one of the sentinel errors once, naming the
// object it concerns:
//
//	return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
//
// and the boundary (API server, RPC handler) asks which class an error belongs
// to with errors.Is, or with the helpers below, to choose a status code. What
// a client sees is the message; internal detail is logged, not sent.
package errdefs

import (
	"errors"
	"net/http"
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
