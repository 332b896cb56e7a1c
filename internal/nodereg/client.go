package nodereg

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errhttp"
	"github.com/warren-sandbox/warren/internal/nodeauth"
)

// DefaultHeartbeatInterval is the time between two heartbeats of a node.
const DefaultHeartbeatInterval = 5 * time.Second

// DefaultHeartbeatRetry is the time between two attempts while heartbeats
// fail (the API is away): short, so that the control plane hears the node
// within about a second of its return.
const DefaultHeartbeatRetry = time.Second

// Client is a node's side of registration: it sends heartbeats to the API
// at APIURL with the node token.
type Client struct {
	// APIURL is the API's base URL (e.g. "http://warren-api:3000").
	APIURL string
	// Token is the node's own token (WARREN_NODE_TOKEN).
	Token string
	// HTTPClient carries the calls; nil means nodeauth.Client(nil) with a
	// 10 s timeout (no proxy from the environment, no redirects: the
	// token goes to the API and nowhere else).
	HTTPClient *http.Client
	// Logger receives failed heartbeats; nil discards them.
	Logger *slog.Logger
	// Retry is the time between two attempts after a failed heartbeat
	// (default DefaultHeartbeatRetry, at most the interval).
	Retry time.Duration
}

// Heartbeat sends one heartbeat and returns the API's reply. A refused
// token is errdefs.ErrUnauthorized, a refused status ErrInvalid, anything
// else ErrUnavailable.
func (c *Client) Heartbeat(ctx context.Context, st Status) (*Reply, error) {
	body, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("heartbeat of node %q: %w", st.ID, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.APIURL, "/")+HeartbeatPath, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("heartbeat of node %q: %w: %w", st.ID, errdefs.ErrInvalid, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTPClient
	if hc == nil {
		hc = nodeauth.Client(nil)
		hc.Timeout = 10 * time.Second
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("heartbeat of node %q: %w: %w", st.ID, errdefs.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	err = errhttp.FromResponse(resp)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if err != nil {
		switch {
		case errdefs.IsUnauthorized(err), errdefs.IsInvalid(err):
			return nil, fmt.Errorf("heartbeat of node %q: API answered %w", st.ID, err)
		}
		// Anything else is the API's trouble: tried again.
		return nil, fmt.Errorf("heartbeat of node %q: API answered %v: %w", st.ID, err, errdefs.ErrUnavailable)
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var r Reply
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("heartbeat of node %q: reply: %w", st.ID, err)
	}
	return &r, nil
}

// Run sends a heartbeat with what status returns every interval
// (DefaultHeartbeatInterval when zero) until ctx ends; onReply, when set,
// gets each reply (e.g. to stop refilling pools while draining). Failed
// heartbeats are logged and retried every c.Retry until one is accepted:
// the node keeps serving its sandboxes while the API is away, and is heard
// again soon after it returns.
func (c *Client) Run(ctx context.Context, interval time.Duration, status func(context.Context) (Status, error), onReply func(*Reply)) {
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	retry := c.Retry
	if retry <= 0 {
		retry = DefaultHeartbeatRetry
	}
	retry = min(retry, interval)
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	failing := false
	var failingSince time.Time
	for {
		st, err := status(ctx)
		if err == nil {
			var r *Reply
			r, err = c.Heartbeat(ctx, st)
			if err == nil {
				if failing {
					log.Info("heartbeat accepted again", "node_id", st.ID, "failed_for", time.Since(failingSince).Round(time.Millisecond).String())
				}
				failing = false
				if onReply != nil {
					onReply(r)
				}
			}
		}
		next := interval
		if err != nil && ctx.Err() == nil {
			if !failing {
				failingSince = time.Now()
				log.Warn("node heartbeat failed; retrying until one is accepted", "error", err, "retry_every", retry.String())
			} else {
				log.Debug("node heartbeat failed", "error", err)
			}
			failing = true
			next = retry
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
