package webhooks_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/webhooks"
)

// verifyLikeDocs is the verification snippet of docs/api.md, kept here so
// that it is compiled and checked against Sign.
func verifyLikeDocs(secret string, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var ts, sig string
	for _, part := range strings.Split(r.Header.Get("X-Warren-Signature"), ",") {
		if k, v, ok := strings.Cut(part, "="); ok && k == "t" {
			ts = v
		} else if ok && k == "v1" {
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return nil, errors.New("stale or missing timestamp")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	if !hmac.Equal([]byte(sig), []byte(hex.EncodeToString(mac.Sum(nil)))) {
		return nil, errors.New("bad signature")
	}
	return body, nil
}

func TestDocsSnippetVerifies(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"sandbox.lifecycle.killed"}`)
	tests := []struct {
		name   string
		secret string
		at     time.Time
		ok     bool
	}{
		{"good", "sec", time.Now(), true},
		{"wrong secret", "other", time.Now(), false},
		{"old", "sec", time.Now().Add(-time.Hour), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
			r.Header.Set(webhooks.HeaderSignature, webhooks.Sign("sec", tc.at, body))
			_, err := verifyLikeDocs(tc.secret, r)
			if (err == nil) != tc.ok {
				t.Fatalf("verify: %v, want ok=%t", err, tc.ok)
			}
		})
	}
}
