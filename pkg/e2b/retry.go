package e2b

import (
	"net/http"
	"strconv"
	"time"
)

// DefaultRetries is how often a REST request answered 429 with a numeric
// Retry-After is sent again, as in the JS SDK.
const DefaultRetries = 3

// maxRetryWait bounds one Retry-After wait.
const maxRetryWait = time.Minute

// retrying sends a REST request again after the server's Retry-After
// (seconds) when it answers 429, at most retries times; other answers,
// and 429s without a numeric Retry-After, are returned as they are.
type retrying struct {
	next    http.RoundTripper
	retries int
}

func (r retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		resp, err := r.next.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests || attempt >= r.retries {
			return resp, err
		}
		secs, perr := strconv.Atoi(resp.Header.Get("Retry-After"))
		if perr != nil || secs < 0 || (req.Body != nil && req.GetBody == nil) {
			return resp, nil
		}
		resp.Body.Close()
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
		t := time.NewTimer(min(time.Duration(secs)*time.Second, maxRetryWait))
		select {
		case <-req.Context().Done():
			t.Stop()
			return nil, req.Context().Err()
		case <-t.C:
		}
	}
}
