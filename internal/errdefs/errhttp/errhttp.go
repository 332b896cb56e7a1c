// Package errhttp is the one table between Warren's error classes
// (internal/errdefs) and HTTP, both directions, for every HTTP boundary:
// the REST API (internal/apiserver), the node registry's routes, the
// builder's upload handler, the edge proxy and envd's HTTP routes.
//
// Forward, Status gives the status of an error's class and Write answers
// an error with Warren's error body, {"code": <status>, "message": "..."}
// (E2B's shape), whose message is the one chosen where the error was made
// (errdefs.Message) or else the class's own words: never the error's text,
// which is for the log. Handlers return an error (HTTPError{Code, Msg, Err},
// tailscale's tsweb style, when the table's status or message does not
// fit) and Handler writes it.
//
// Backward, Class gives the class of a status and FromResponse turns an
// error answer into an error of its class. Two classes share 409 (already
// exists, conflict), so Write also names the class in the ClassHeader
// response header, which FromResponse reads first: no class is lost
// between Warren's own ends.
package errhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// ClassHeader names an error answer's class (Name), set by Write.
const ClassHeader = "Warren-Error-Class"

// row is one class on the HTTP wire.
type row struct {
	class  error
	status int
	// name is the class in ClassHeader.
	name string
	// msg is what a client is told of an error of the class that carries
	// no message of its own.
	msg string
}

// table is the one mapping. The first row of a status is the class Class
// gives for it: conflict before already-exists, which share 409.
var table = []row{
	{errdefs.ErrNotFound, http.StatusNotFound, "not_found", "not found"},
	{errdefs.ErrConflict, http.StatusConflict, "conflict", "conflict with the current state"},
	{errdefs.ErrAlreadyExists, http.StatusConflict, "already_exists", "already exists"},
	{errdefs.ErrInvalid, http.StatusBadRequest, "invalid", "invalid request"},
	{errdefs.ErrExhausted, http.StatusTooManyRequests, "exhausted", "resource exhausted: try again later"},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable, "unavailable", "service unavailable"},
	{errdefs.ErrUnsupported, http.StatusNotImplemented, "unsupported", "not supported"},
	{errdefs.ErrUnauthorized, http.StatusUnauthorized, "unauthorized", "unauthorized"},
	{errdefs.ErrForbidden, http.StatusForbidden, "forbidden", "forbidden"},
}

// internalMsg is what a client is told of an error of no class.
const internalMsg = "internal error"

// rowOf returns the row of err's class (nil for no class).
func rowOf(err error) *row {
	for i := range table {
		if errors.Is(err, table[i].class) {
			return &table[i]
		}
	}
	return nil
}

// Status is the HTTP status of err: an HTTPError's Code if err is one (or
// wraps one) that sets it, else its class's, 500 for no class, 200 for nil.
func Status(err error) int {
	if err == nil {
		return http.StatusOK
	}
	var he *HTTPError
	if errors.As(err, &he) && he.Code != 0 {
		return he.Code
	}
	if r := rowOf(err); r != nil {
		return r.status
	}
	return http.StatusInternalServerError
}

// Message is what a client is told of err: the message chosen where it was
// made (errdefs.Message: Publicf, WithMessage, an HTTPError's Msg, ...),
// else its class's words ("not found", "service unavailable"), else
// "internal error". It is never derived from err's text.
func Message(err error) string {
	if err == nil {
		return ""
	}
	if msg, ok := errdefs.Message(err); ok && msg != "" {
		return msg
	}
	if r := rowOf(err); r != nil {
		return r.msg
	}
	return internalMsg
}

// Name is the name of err's class in ClassHeader ("not_found"), "" for
// no class.
func Name(err error) string {
	if r := rowOf(err); r != nil {
		return r.name
	}
	return ""
}

// Class returns the class of an error answer's status, nil for a status of
// no class (500, or not an error). 409 is errdefs.ErrConflict: only
// ClassHeader tells an already-exists answer apart (FromResponse).
func Class(status int) error {
	for _, r := range table {
		if r.status == status {
			return r.class
		}
	}
	switch status {
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		// A proxy in between could not reach the server.
		return errdefs.ErrUnavailable
	}
	return nil
}

// ClassOf returns the class of an answer's status and ClassHeader, nil for
// no class.
func ClassOf(status int, h http.Header) error {
	if name := h.Get(ClassHeader); name != "" {
		for _, r := range table {
			if r.name == name {
				return r.class
			}
		}
	}
	return Class(status)
}

// HTTPError is an error with what an HTTP client is told of it: the
// client gets Code and Msg, the log gets Err (tailscale's tsweb.HTTPError).
// A handler returns one when the table's status or the error's message
// does not fit the answer; a zero Code is the status of Err's class, an
// empty Msg is Message(Err).
type HTTPError struct {
	Code int
	Msg  string
	Err  error
	// Header is added to the answer (Retry-After, Allow).
	Header http.Header
}

// Error is the text for the log: Err's text, or Msg when Err is nil.
func (e *HTTPError) Error() string {
	switch {
	case e.Err != nil && e.Msg != "":
		return e.Msg + ": " + e.Err.Error()
	case e.Err != nil:
		return e.Err.Error()
	}
	return e.Msg
}

// Unwrap returns Err, whose class it keeps.
func (e *HTTPError) Unwrap() error { return e.Err }

// PublicMessage is what the client is told (errdefs.Public): Msg, else
// the message Err carries.
func (e *HTTPError) PublicMessage() string {
	if e.Msg != "" {
		return e.Msg
	}
	msg, _ := errdefs.Message(e.Err)
	return msg
}

var _ errdefs.Public = (*HTTPError)(nil)

// Errorf returns an HTTPError of code whose formatted text is the client's
// message, for an answer of a status outside the table (405, 413, 507).
func Errorf(code int, format string, args ...any) *HTTPError {
	return &HTTPError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// From returns what a client is told of err (non-nil) as an HTTPError: its
// status (Status), message (Message) and the headers of any HTTPError it
// is or wraps; Err is err, for the log.
func From(err error) *HTTPError {
	he := &HTTPError{Code: Status(err), Msg: Message(err), Err: err, Header: http.Header{}}
	var inner *HTTPError
	if errors.As(err, &inner) {
		for k, v := range inner.Header {
			he.Header[k] = v
		}
	}
	if name := Name(err); name != "" {
		he.Header.Set(ClassHeader, name)
	}
	return he
}

// Body is Warren's error body (E2B's): code equals the HTTP status.
type Body struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Write answers err (non-nil) with From(err): its headers, status and
// Body. It returns the HTTPError it wrote, for the caller's log.
func Write(w http.ResponseWriter, err error) *HTTPError {
	he := From(err)
	WriteHTTPError(w, he)
	return he
}

// WriteHTTPError answers with he as From made it (Code and Msg set).
func WriteHTTPError(w http.ResponseWriter, he *HTTPError) {
	for k, v := range he.Header {
		w.Header()[k] = v
	}
	WriteBody(w, he.Code, he.Msg)
}

// WriteBody answers with status and Body{status, msg}, for an answer
// whose status and message the caller chose itself.
func WriteBody(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(Body{Code: status, Message: msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b) // the client went away
}

// ResponseError is an error answer read back by FromResponse. Its class
// is the answer's (ClassOf); Msg is the server's message for its clients.
type ResponseError struct {
	Status int
	Msg    string
	class  error
}

func (e *ResponseError) Error() string {
	if e.Msg == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Msg)
}

// Unwrap returns the answer's class (nil for none).
func (e *ResponseError) Unwrap() error { return e.class }

// PublicMessage is the server's message: Warren's servers choose it for
// their clients (Write), so a caller may pass it on to its own.
func (e *ResponseError) PublicMessage() string { return e.Msg }

var _ errdefs.Public = (*ResponseError)(nil)

// maxBody bounds the error body FromResponse reads.
const maxBody = 64 << 10

// FromResponse returns nil for a 2xx or 3xx answer, else a *ResponseError
// of the answer's class with the message of its body (Body, or the text of
// a body that is not one). It reads resp.Body; the caller closes it.
func FromResponse(resp *http.Response) error {
	if resp.StatusCode < 400 {
		return nil
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	msg := strings.TrimSpace(string(data))
	var b Body
	if json.Unmarshal(data, &b) == nil && b.Message != "" {
		msg = b.Message
	}
	msg, _, _ = strings.Cut(msg, "\n")
	return &ResponseError{Status: resp.StatusCode, Msg: msg, class: ClassOf(resp.StatusCode, resp.Header)}
}
