package errhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// hostError is what an internal failure's text looks like.
const hostError = "runsc create: exit status 128: open /var/lib/wstr-secret/x/config.json: permission denied"

// answer writes err with Write and returns the recorded answer.
func answer(err error) *http.Response {
	rec := httptest.NewRecorder()
	Write(rec, err)
	return rec.Result()
}

// Every class crosses the HTTP wire and comes back as itself and as no
// other class; the status alone gives every class but already-exists,
// which shares 409 with conflict.
func TestClassRoundTrip(t *testing.T) {
	t.Parallel()
	if len(table) != len(errdefs.Classes()) {
		t.Fatalf("the table has %d rows for %d classes", len(table), len(errdefs.Classes()))
	}
	for _, class := range errdefs.Classes() {
		t.Run(class.Error(), func(t *testing.T) {
			t.Parallel()
			err := fmt.Errorf("sandbox %q: %w", "x", class)
			status := Status(err)
			if status < 400 || status == http.StatusInternalServerError {
				t.Fatalf("Status = %d", status)
			}
			if got := Class(status); got != class && class != errdefs.ErrAlreadyExists {
				t.Fatalf("Class(Status) = %v", got)
			}
			resp := answer(err)
			back := FromResponse(resp)
			if resp.StatusCode != status || !errors.Is(back, class) || errdefs.Class(back) != class {
				t.Fatalf("through the wire: %d %v (class %v)", resp.StatusCode, back, errdefs.Class(back))
			}
			for _, other := range errdefs.Classes() {
				if other != class && errors.Is(back, other) {
					t.Fatalf("came back also as %v", other)
				}
			}
		})
	}
	if Class(http.StatusConflict) != errdefs.ErrConflict {
		t.Fatal("409 without the class header is not a conflict")
	}
	if Status(nil) != http.StatusOK || Status(errors.New("boom")) != http.StatusInternalServerError || Class(http.StatusInternalServerError) != nil {
		t.Fatal("no class is not 500")
	}
	if FromResponse(answer(errors.New(hostError))).(*ResponseError).Unwrap() != nil {
		t.Fatal("a 500 came back with a class")
	}
}

// A client is told the message chosen where the error was made, or its
// class's words: never the error's text.
func TestWriteTellsNoInternalText(t *testing.T) {
	t.Parallel()
	host := errors.New(hostError)
	cases := []struct {
		name   string
		err    error
		status int
		msg    string
	}{
		{"no class", fmt.Errorf("sandbox %q: %w", "x", host), 500, "internal error"},
		{"public", errdefs.Publicf(errdefs.ErrNotFound, "sandbox %q doesn't exist", "x"), 404, `sandbox "x" doesn't exist`},
		{"with message", errdefs.WithMessage(fmt.Errorf("%w: %w", host, errdefs.ErrUnavailable), "no node could start it"), 503, "no node could start it"},
		{"http error", &HTTPError{Code: http.StatusRequestEntityTooLarge, Msg: "upload too large", Err: host}, 413, "upload too large"},
		{"http error of a class", &HTTPError{Err: fmt.Errorf("%w: %w", host, errdefs.ErrForbidden)}, 403, "forbidden"},
		{"http error of a public error", &HTTPError{Err: errdefs.Publicf(errdefs.ErrForbidden, "not yours")}, 403, "not yours"},
		{"errorf", Errorf(http.StatusMethodNotAllowed, "use %s", "PUT"), 405, "use PUT"},
	}
	for _, class := range errdefs.Classes() {
		cases = append(cases, struct {
			name   string
			err    error
			status int
			msg    string
		}{"class " + class.Error(), fmt.Errorf("%w: %w", host, class), Status(class), Message(class)})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := answer(tc.err)
			data, _ := io.ReadAll(resp.Body)
			var b Body
			if err := json.Unmarshal(data, &b); err != nil || resp.StatusCode != tc.status || b.Code != tc.status || b.Message != tc.msg {
				t.Fatalf("answer %d %s, want %d {code:%d, message:%q}", resp.StatusCode, data, tc.status, tc.status, tc.msg)
			}
			for _, leak := range []string{"wstr", "runsc", "permission denied", ": not found", ": invalid argument"} {
				if strings.Contains(b.Message, leak) {
					t.Fatalf("client message %q carries the error's text (%q)", b.Message, leak)
				}
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
		})
	}
}

func TestHeadersAndFromResponse(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("throttled: %w", &HTTPError{Err: errdefs.ErrExhausted, Header: http.Header{"Retry-After": {"7"}}})
	resp := answer(err)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" || resp.Header.Get(ClassHeader) != "exhausted" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	// A body that is not Warren's is read as text; a 502 of a proxy in
	// between is unavailable.
	resp = &http.Response{StatusCode: 502, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("bad gateway\nmore"))}
	back := FromResponse(resp)
	if !errdefs.IsUnavailable(back) || back.Error() != "HTTP 502: bad gateway" {
		t.Fatalf("FromResponse = %v", back)
	}
	if msg, ok := errdefs.Message(back); !ok || msg != "bad gateway" {
		t.Fatalf("the server's message: %q %t", msg, ok)
	}
	if FromResponse(&http.Response{StatusCode: 204, Body: http.NoBody}) != nil {
		t.Fatal("a success is an error")
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	var logged []string
	h := Handler(func(w http.ResponseWriter, r *http.Request) error {
		if r.URL.Path == "/ok" {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		return fmt.Errorf("lookup: %w", errors.New(hostError))
	}, func(_ *http.Request, he *HTTPError) {
		logged = append(logged, he.Err.Error())
		he.Header.Set("X-Seen", "1")
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ok", nil))
	if rec.Code != 204 || len(logged) != 0 {
		t.Fatalf("ok: %d, logged %v", rec.Code, logged)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/fail", nil))
	if rec.Code != 500 || rec.Header().Get("X-Seen") != "1" || strings.Contains(rec.Body.String(), "wstr") {
		t.Fatalf("fail: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "wstr-secret") {
		t.Fatalf("the log did not get the error: %v", logged)
	}
	for code, want := range map[int]slog.Level{500: slog.LevelError, 503: slog.LevelWarn, 404: slog.LevelDebug} {
		if got := LogLevel(&HTTPError{Code: code}); got != want {
			t.Errorf("LogLevel(%d) = %v", code, got)
		}
	}
}
