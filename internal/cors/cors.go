// Package cors is the cross-origin policy of Warren's API, its edge proxy
// (for envd's port) and envd, as E2B's are: any origin may call them from
// a browser (they authenticate by header, never by cookie), preflights are
// answered without authentication, and the response headers the SDKs
// read are exposed.
package cors

import (
	"net/http"
	"strings"
)

// exposed are the response headers a browser client may read: paging
// (x-next-token), Connect RPC's, downloads' and rate limiting's.
var exposed = strings.Join([]string{
	"X-Next-Token", "X-Total-Running", "Retry-After", "Location",
	"Content-Encoding", "Content-Disposition", "Content-Length",
	"Connect-Content-Encoding", "Connect-Accept-Encoding",
	"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin",
}, ", ")

// methods are the methods a preflight allows.
const methods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// maxAge is how long (seconds) a browser may cache a preflight's answer.
const maxAge = "7200"

// IsPreflight reports whether r is a CORS preflight request.
func IsPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != ""
}

// Preflight answers a preflight: 204 allowing the requested method and
// headers from any origin.
func Preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", methods)
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		// Echoed, not "*": a wildcard does not cover Authorization, which
		// envd's RPCs carry (the user).
		h.Set("Access-Control-Allow-Headers", req)
	}
	h.Set("Access-Control-Max-Age", maxAge)
	h.Add("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
	w.WriteHeader(http.StatusNoContent)
}

// Allow marks the response to a cross-origin request r as readable by its
// origin. Requests without Origin are left alone.
func Allow(h http.Header, r *http.Request) {
	if r.Header.Get("Origin") == "" {
		return
	}
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Expose-Headers", exposed)
}

// Handler wraps next with the policy: preflights are answered here, other
// cross-origin requests reach next with the allow headers set.
func Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsPreflight(r) {
			Preflight(w, r)
			return
		}
		Allow(w.Header(), r)
		next.ServeHTTP(w, r)
	})
}
