package apiserver

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics counts the API's requests by route pattern (the ServeMux
// pattern, never the path: no sandbox IDs as labels), method and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func (s *Server) initHTTPMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	hm := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "api_http_requests_total",
			Help: "API requests by route pattern, method and status code.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "api_http_request_duration_seconds",
			Help:    "API request durations by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9), // 1 ms .. 65 s
		}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{hm.requests, hm.duration} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("api metrics: %w", err)
		}
	}
	s.hm = hm
	return nil
}

// observe records one request once it is served. The mux has set
// r.Pattern to the matched route by then.
func (hm *httpMetrics) observe(r *http.Request, w *statusWriter, start time.Time) {
	route := r.Pattern
	if route == "" {
		route = "unmatched"
	}
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	method := r.Method
	switch method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions:
	default:
		method = "other"
	}
	hm.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	hm.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes streaming responses through.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
