package awsauth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// ECRUsername is the registry user of every ECR authorization token.
const ECRUsername = "AWS"

// DefaultECRTimeout bounds one GetAuthorizationToken call when ECR.Timeout
// is zero.
const DefaultECRTimeout = 30 * time.Second

// regionRE is the shape of an AWS region name (us-east-1, us-gov-west-1):
// it also keeps the region from changing the endpoint's host.
var regionRE = regexp.MustCompile(`^[a-z]{2}(-[a-z0-9]+)+-[0-9]+$`)

// ValidRegion reports whether region looks like an AWS region name.
func ValidRegion(region string) bool { return regionRE.MatchString(region) }

// ECR exchanges an access key for the password of the ECR registries of
// its account in Region (ECR's GetAuthorizationToken).
type ECR struct {
	Credentials Credentials
	Region      string
	// Endpoint is the ECR API's URL; empty means
	// https://api.ecr.<Region>.amazonaws.com/ (.amazonaws.com.cn in China).
	// Tests point it at a local server.
	Endpoint string
	// Client sends the request; nil means http.DefaultClient.
	Client *http.Client
	// Timeout bounds the exchange; zero means DefaultECRTimeout.
	Timeout time.Duration
}

// String names the account's key and region, never the secret.
func (e *ECR) String() string {
	return fmt.Sprintf("ECR %s with %s", e.Region, e.Credentials)
}

func (e *ECR) endpoint() string {
	if e.Endpoint != "" {
		return e.Endpoint
	}
	suffix := ".amazonaws.com"
	if strings.HasPrefix(e.Region, "cn-") {
		suffix = ".amazonaws.com.cn"
	}
	return "https://api.ecr." + e.Region + suffix + "/"
}

// ecrError is the JSON error body of AWS's JSON protocol.
type ecrError struct {
	Type     string `json:"__type"`
	Message  string `json:"message"`
	Message2 string `json:"Message"`
}

// authErrors are the error types of credentials AWS refuses.
var authErrors = map[string]bool{
	"UnrecognizedClientException": true, "InvalidSignatureException": true,
	"AccessDeniedException": true, "ExpiredTokenException": true,
	"IncompleteSignatureException": true, "MissingAuthenticationTokenException": true,
	"InvalidClientTokenId": true, "SignatureDoesNotMatch": true, "UnauthorizedOperation": true,
}

// Login calls GetAuthorizationToken and returns the registry's basic auth:
// ECRUsername and the token's password. Refused credentials are
// errdefs.ErrUnauthorized with ECR's message; an unreachable or failing
// ECR (or the timeout) is errdefs.ErrUnavailable.
func (e *ECR) Login(ctx context.Context) (username, password string, err error) {
	if e.Credentials.AccessKeyID == "" || e.Credentials.SecretAccessKey == "" {
		return "", "", fmt.Errorf("ECR login: access key id and secret access key are required: %w", errdefs.ErrInvalid)
	}
	if !ValidRegion(e.Region) {
		return "", "", fmt.Errorf("ECR login: region %q is not an AWS region name: %w", e.Region, errdefs.ErrInvalid)
	}
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = DefaultECRTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body := []byte("{}")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint(), bytes.NewReader(body))
	if err != nil {
		return "", "", fmt.Errorf("ECR login in %s: %v: %w", e.Region, err, errdefs.ErrInvalid)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken")
	if err := Sign(req, body, e.Credentials, e.Region, "ecr", time.Now()); err != nil {
		return "", "", err
	}
	client := e.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return "", "", fmt.Errorf("ECR login in %s: no answer from %s within %s: %w", e.Region, e.endpoint(), timeout, errdefs.ErrUnavailable)
		}
		return "", "", fmt.Errorf("ECR login in %s: %v: %w", e.Region, err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", "", fmt.Errorf("ECR login in %s: reading the answer: %v: %w", e.Region, err, errdefs.ErrUnavailable)
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", answerError(e.Region, resp.StatusCode, raw)
	}
	var out struct {
		AuthorizationData []struct {
			AuthorizationToken string `json:"authorizationToken"`
		} `json:"authorizationData"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.AuthorizationData) == 0 {
		return "", "", fmt.Errorf("ECR login in %s: the answer has no authorization token: %w", e.Region, errdefs.ErrUnavailable)
	}
	dec, err := base64.StdEncoding.DecodeString(out.AuthorizationData[0].AuthorizationToken)
	if err != nil {
		return "", "", fmt.Errorf("ECR login in %s: the authorization token is not base64: %w", e.Region, errdefs.ErrUnavailable)
	}
	user, pass, ok := strings.Cut(string(dec), ":")
	if !ok || pass == "" {
		return "", "", fmt.Errorf("ECR login in %s: the authorization token is not user:password: %w", e.Region, errdefs.ErrUnavailable)
	}
	return user, pass, nil
}

// answerError turns ECR's error answer into an error of the right class
// carrying ECR's own message.
func answerError(region string, status int, raw []byte) error {
	var ae ecrError
	_ = json.Unmarshal(raw, &ae)
	msg := ae.Message
	if msg == "" {
		msg = ae.Message2
	}
	if msg == "" {
		msg = strings.TrimSpace(string(raw))
		if len(msg) > 300 {
			msg = msg[:300] + "..."
		}
	}
	typ := ae.Type
	if i := strings.LastIndexByte(typ, '#'); i >= 0 {
		typ = typ[i+1:]
	}
	what := fmt.Sprintf("ECR refused GetAuthorizationToken in %s (HTTP %d", region, status)
	if typ != "" {
		what += " " + typ
	}
	what += "): " + msg
	switch {
	case authErrors[typ] || status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("%s: %w", what, errdefs.ErrUnauthorized)
	case status >= 500 || status == http.StatusTooManyRequests || typ == "ThrottlingException":
		return fmt.Errorf("ECR login in %s failed (HTTP %d %s): %s: %w", region, status, typ, msg, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("%s: %w", what, errdefs.ErrInvalid)
}
