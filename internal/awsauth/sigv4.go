// Package awsauth signs AWS API requests with Signature Version 4 and
// exchanges AWS access keys for an Amazon ECR registry password, so the
// template builder can pull from a private ECR repository without the AWS
// SDK.
package awsauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// Credentials are an AWS access key pair, with the session token of
// temporary credentials when there is one.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
}

// String names the access key and hides the secret.
func (c Credentials) String() string {
	return fmt.Sprintf("aws key %s (secret hidden)", c.AccessKeyID)
}

// GoString hides the secret from %#v too.
func (c Credentials) GoString() string { return c.String() }

const (
	algorithm  = "AWS4-HMAC-SHA256"
	timeFormat = "20060102T150405Z"
	dateFormat = "20060102"
)

// Sign signs req, whose body is body (nil for none), for service in region
// at time t: it sets X-Amz-Date (and X-Amz-Security-Token for temporary
// credentials) and Authorization. Every header already set on req, and
// Host, is signed; set headers before signing and none after.
func Sign(req *http.Request, body []byte, c Credentials, region, service string, t time.Time) error {
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return fmt.Errorf("aws request signing: access key id and secret access key are required: %w", errdefs.ErrInvalid)
	}
	t = t.UTC()
	req.Header.Del("Authorization")
	req.Header.Set("X-Amz-Date", t.Format(timeFormat))
	if c.SessionToken != "" {
		req.Header.Set("X-Amz-Security-Token", c.SessionToken)
	}
	canonical, signed := CanonicalRequest(req, body)
	scope := strings.Join([]string{t.Format(dateFormat), region, service, "aws4_request"}, "/")
	sig := signature(c.SecretAccessKey, t, region, service, stringToSign(t, scope, canonical))
	req.Header.Set("Authorization", fmt.Sprintf("%s Credential=%s/%s, SignedHeaders=%s, Signature=%s", algorithm, c.AccessKeyID, scope, signed, sig))
	return nil
}

// CanonicalRequest is req in SigV4's canonical form, and the
// semicolon-separated list of the headers it signs (Host and every header
// on req except Authorization).
func CanonicalRequest(req *http.Request, body []byte) (canonical, signedHeaders string) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	values := map[string]string{"host": trimAll(host)}
	for k, vs := range req.Header {
		lk := strings.ToLower(k)
		if lk == "authorization" {
			continue
		}
		trimmed := make([]string, len(vs))
		for i, v := range vs {
			trimmed[i] = trimAll(v)
		}
		values[lk] = strings.Join(trimmed, ",")
	}
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	var hdrs strings.Builder
	for _, k := range names {
		hdrs.WriteString(k + ":" + values[k] + "\n")
	}
	signedHeaders = strings.Join(names, ";")
	sum := sha256.Sum256(body)
	canonical = strings.Join([]string{
		req.Method,
		canonicalPath(req.URL.EscapedPath()),
		canonicalQuery(req.URL.RawQuery),
		hdrs.String(),
		signedHeaders,
		hex.EncodeToString(sum[:]),
	}, "\n")
	return canonical, signedHeaders
}

func stringToSign(t time.Time, scope, canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return strings.Join([]string{algorithm, t.Format(timeFormat), scope, hex.EncodeToString(sum[:])}, "\n")
}

// signature derives the signing key from the secret for the day, region
// and service, and signs s with it.
func signature(secret string, t time.Time, region, service, s string) string {
	k := hmacSHA256([]byte("AWS4"+secret), t.Format(dateFormat))
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	k = hmacSHA256(k, "aws4_request")
	return hex.EncodeToString(hmacSHA256(k, s))
}

func hmacSHA256(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// trimAll trims s and collapses its runs of spaces to one.
func trimAll(s string) string { return strings.Join(strings.Fields(s), " ") }

// canonicalPath is the URI-encoded path; "/" when empty. Services other
// than S3 encode each segment twice: once for the URI, once here.
func canonicalPath(escaped string) string {
	if escaped == "" {
		return "/"
	}
	segs := strings.Split(escaped, "/")
	for i, s := range segs {
		segs[i] = uriEncode(s)
	}
	return strings.Join(segs, "/")
}

// canonicalQuery sorts the query's parameters by name then value, each
// URI-encoded.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	var pairs []string
	for _, p := range strings.Split(raw, "&") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		pairs = append(pairs, uriEncode(unescape(k))+"="+uriEncode(unescape(v)))
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "&")
}

// unescape undoes the query's percent-encoding ('+' stays a plus, as SigV4
// expects); a malformed escape is kept as it is.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := hex.DecodeString(s[i+1 : i+3]); err == nil {
				b.WriteByte(v[0])
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// uriEncode percent-encodes every byte but the unreserved characters
// A-Z a-z 0-9 - _ . ~, in upper-case hex.
func uriEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
