package noderpc

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// NewMux returns the node agent's whole HTTP surface: the NodeService
// (NewHandler) and, when g is set, Prometheus text at GET /metrics (the
// agent's series: see docs/metrics.md). With opts.Token set, /metrics asks
// for "Authorization: Bearer" with it or with opts.MetricsToken.
func NewMux(svc nodeapi.Service, opts Options, g prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(NewHandler(svc, opts))
	if g != nil {
		h := promhttp.HandlerFor(g, promhttp.HandlerOpts{})
		mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if opts.Token != "" {
				got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
				ok := subtle.ConstantTimeCompare([]byte(got), []byte(opts.Token)) == 1
				ok = ok || opts.MetricsToken != "" && subtle.ConstantTimeCompare([]byte(got), []byte(opts.MetricsToken)) == 1
				if !ok {
					http.Error(w, "unauthorized", http.StatusUnauthorized)
					return
				}
			}
			h.ServeHTTP(w, r)
		}))
	}
	return mux
}
