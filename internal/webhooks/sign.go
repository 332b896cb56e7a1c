package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Headers of a delivery.
const (
	// HeaderSignature carries "t=<unix seconds>,v1=<hex HMAC-SHA256>",
	// the HMAC keyed by the webhook's secret over "<t>.<body>".
	HeaderSignature = "X-Warren-Signature"
	HeaderWebhookID = "X-Warren-Webhook-Id"
	// HeaderDeliveryID is the same on every attempt of one delivery, so a
	// receiver can drop duplicates (delivery is at least once).
	HeaderDeliveryID = "X-Warren-Delivery-Id"
	HeaderEventID    = "X-Warren-Event-Id"
	// E2B's headers, for receivers written against E2B: e2b-signature is
	// the unpadded base64 SHA-256 of the secret followed by the body (no
	// timestamp: prefer HeaderSignature).
	HeaderE2BWebhookID        = "e2b-webhook-id"
	HeaderE2BDeliveryID       = "e2b-delivery-id"
	HeaderE2BSignatureVersion = "e2b-signature-version"
	HeaderE2BSignature        = "e2b-signature"
)

// Sign returns the HeaderSignature value for body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// E2BSignature returns the e2b-signature value of body.
func E2BSignature(secret string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(secret))
	h.Write(body)
	return strings.TrimRight(base64.StdEncoding.EncodeToString(h.Sum(nil)), "=")
}

// ErrBadSignature is returned by Verify for a signature that does not match.
var ErrBadSignature = errors.New("webhook signature does not match")

// Verify checks a HeaderSignature value against body: the HMAC must match
// and its timestamp be within tolerance of now (0 skips the time check).
func Verify(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	var ts string
	var sigs []string
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: malformed header: %w", ErrBadSignature, errdefs.ErrUnauthorized)
	}
	if tolerance > 0 {
		if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
			return fmt.Errorf("%w: timestamp %ds off: %w", ErrBadSignature, int(d.Seconds()), errdefs.ErrUnauthorized)
		}
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("%w: %w", ErrBadSignature, errdefs.ErrUnauthorized)
}
