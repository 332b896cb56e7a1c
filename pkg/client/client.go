// Package client is a small Go client for Warren's E2B-compatible REST
// API: create, list, inspect, time out, pause, connect and kill sandboxes.
// E2B has no Go SDK; this one speaks the same wire format as the JS and
// Python SDKs, so it works against Warren and against E2B.
//
//	c := client.New("http://127.0.0.1:3000", os.Getenv("E2B_API_KEY"))
//	sb, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to one API server.
type Client struct {
	base   string
	apiKey string
	// HTTP is the transport (http.DefaultClient when nil).
	HTTP *http.Client
	// Header is added to every request (e.g. X-Admin-Token).
	Header http.Header
}

// New returns a client for the API at baseURL authenticating with apiKey.
func New(baseURL, apiKey string) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), apiKey: apiKey, Header: http.Header{}}
}

// APIError is a non-2xx answer.
type APIError struct {
	Status  int
	Message string
	// RetryAfter is the Retry-After header of a 429, verbatim.
	RetryAfter string
}

func (e *APIError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// Do sends a request with an optional JSON body and decodes a JSON answer
// into out (when non-nil). It returns the response headers and status.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) (http.Header, int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, 0, err
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	if c.apiKey != "" {
		req.Header.Set("X-API-Key", c.apiKey)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.Header, resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		var e Error
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Message != "" {
			msg = e.Message
		}
		return resp.Header, resp.StatusCode, &APIError{Status: resp.StatusCode, Message: msg, RetryAfter: resp.Header.Get("Retry-After")}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.Header, resp.StatusCode, fmt.Errorf("decode %s %s answer: %w", method, path, err)
		}
	}
	return resp.Header, resp.StatusCode, nil
}

// Create starts a sandbox (POST /v2/sandboxes).
func (c *Client) Create(ctx context.Context, req NewSandbox) (*Sandbox, error) {
	var out Sandbox
	_, _, err := c.Do(ctx, http.MethodPost, "/v2/sandboxes", req, &out)
	return &out, err
}

// Get returns one sandbox.
func (c *Client) Get(ctx context.Context, id string) (*SandboxDetail, error) {
	var out SandboxDetail
	_, _, err := c.Do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// ListOptions filter List.
type ListOptions struct {
	Metadata map[string]string
	State    []string
	// StartedAfter keeps sandboxes started at or after this time (sent in RFC
	// 3339 with nanoseconds; none when zero).
	StartedAfter time.Time
	// Template keeps sandboxes of a template (ID or alias).
	Template string
	// Order is "asc" or "desc" by start time (the server's default,
	// desc, when empty), across all pages.
	Order     string
	Limit     int
	NextToken string
}

// List returns one page of sandboxes and the token of the next page ("" on
// the last).
func (c *Client) List(ctx context.Context, o ListOptions) ([]ListedSandbox, string, error) {
	q := url.Values{}
	if len(o.Metadata) > 0 {
		md := url.Values{}
		for k, v := range o.Metadata {
			md.Set(url.QueryEscape(k), url.QueryEscape(v))
		}
		q.Set("metadata", url.QueryEscape(md.Encode()))
	}
	if len(o.State) > 0 {
		q.Set("state", strings.Join(o.State, ","))
	}
	if !o.StartedAfter.IsZero() {
		q.Set("startedAfter", o.StartedAfter.UTC().Format(time.RFC3339Nano))
	}
	if o.Template != "" {
		q.Set("template", o.Template)
	}
	if o.Order != "" {
		q.Set("order", o.Order)
	}
	if o.Limit > 0 {
		q.Set("limit", fmt.Sprint(o.Limit))
	}
	if o.NextToken != "" {
		q.Set("nextToken", o.NextToken)
	}
	var out []ListedSandbox
	h, _, err := c.Do(ctx, http.MethodGet, "/v2/sandboxes?"+q.Encode(), nil, &out)
	if err != nil {
		return nil, "", err
	}
	return out, h.Get("X-Next-Token"), nil
}

// Kill stops a sandbox. It returns false when the sandbox did not exist.
func (c *Client) Kill(ctx context.Context, id string) (bool, error) {
	_, _, err := c.Do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil)
	if IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// SetTimeout sets the sandbox's end time to now + seconds.
func (c *Client) SetTimeout(ctx context.Context, id string, seconds int) error {
	_, _, err := c.Do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/timeout", TimeoutRequest{Timeout: seconds}, nil)
	return err
}

// Pause pauses a sandbox. It returns false when it was already paused.
func (c *Client) Pause(ctx context.Context, id string) (bool, error) {
	_, _, err := c.Do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", PauseRequest{}, nil)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		return false, nil
	}
	return err == nil, err
}

// Connect makes sure the sandbox runs for at least seconds more, resuming
// it if paused; resumed tells whether it was.
func (c *Client) Connect(ctx context.Context, id string, seconds int) (sb *Sandbox, resumed bool, err error) {
	var out Sandbox
	_, status, err := c.Do(ctx, http.MethodPost, "/v2/sandboxes/"+url.PathEscape(id)+"/connect", ConnectRequest{Timeout: &seconds}, &out)
	if err != nil {
		return nil, false, err
	}
	return &out, status == http.StatusCreated, nil
}

// EgressLog returns what sandbox id tried to reach through its node's
// egress proxy (sandboxes whose network rules name hosts).
func (c *Client) EgressLog(ctx context.Context, id string) ([]EgressEntry, error) {
	var out []EgressEntry
	_, _, err := c.Do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id)+"/egress", nil, &out)
	return out, err
}
