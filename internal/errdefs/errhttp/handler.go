package errhttp

import (
	"log/slog"
	"net/http"
)

// ReturnHandlerFunc is an HTTP handler that returns its error instead of
// writing it (tailscale's tsweb.ReturnHandler): it answers and returns nil,
// or returns an error before it has written anything, which Handler
// answers.
type ReturnHandlerFunc func(http.ResponseWriter, *http.Request) error

// Handler serves h. An error h returns is made into the HTTPError a
// client is told (From), passed to onError when set (which may add
// headers and logs it), and written.
func Handler(h ReturnHandlerFunc, onError func(*http.Request, *HTTPError)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		he := From(err)
		if onError != nil {
			onError(r, he)
		}
		WriteHTTPError(w, he)
	})
}

// LogLevel is the level to log an answered error at: Error for a 500
// (no class: a bug or an unforeseen failure), Warn for another 5xx, Debug
// for a client's error (4xx), which the client was told of.
func LogLevel(he *HTTPError) slog.Level {
	switch {
	case he.Code == http.StatusInternalServerError:
		return slog.LevelError
	case he.Code >= 500:
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// Log is an onError for Handler that logs he at LogLevel with the
// request's method and path.
func Log(log *slog.Logger, msg string) func(*http.Request, *HTTPError) {
	return func(r *http.Request, he *HTTPError) {
		log.Log(r.Context(), LogLevel(he), msg, "method", r.Method, "path", r.URL.Path, "status", he.Code, "error", he.Err)
	}
}
