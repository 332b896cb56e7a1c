package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

// Metric is one resource usage sample of a sandbox.
type Metric = client.Metric

// MetricsOptions bound the samples returned (all kept samples when zero).
type MetricsOptions struct {
	Start, End time.Time
}

// Metrics returns the sandbox's resource usage samples, oldest first.
func (s *Sandbox) Metrics(ctx context.Context, o MetricsOptions) ([]Metric, error) {
	if s.cfg.Debug {
		return []Metric{}, nil
	}
	if err := s.envd.require(envdMetrics, "metrics"); err != nil {
		return nil, fmt.Errorf("metrics of sandbox %s: %w", s.ID, err)
	}
	q := url.Values{}
	if !o.Start.IsZero() {
		q.Set("start", strconv.FormatInt(o.Start.Unix(), 10))
	}
	if !o.End.IsZero() {
		q.Set("end", strconv.FormatInt(o.End.Unix(), 10))
	}
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	var out []Metric
	if _, _, err := s.api.Do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(s.ID)+"/metrics?"+q.Encode(), nil, &out); err != nil {
		return nil, fmt.Errorf("metrics of sandbox %s: %w", s.ID, err)
	}
	return out, nil
}

// Fork makes count copies of the running sandbox, each running for
// timeout (the server's default when zero). Each fork succeeds or fails
// on its own: the sandboxes made are returned with the errors joined.
func (s *Sandbox) Fork(ctx context.Context, count int, timeout time.Duration) ([]*Sandbox, error) {
	req := client.ForkRequest{Count: &count}
	if timeout > 0 {
		req.Timeout = seconds(timeout)
	}
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	var res []client.ForkResult
	if _, _, err := s.api.Do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(s.ID)+"/fork", req, &res); err != nil {
		return nil, fmt.Errorf("fork sandbox %s: %w", s.ID, err)
	}
	var out []*Sandbox
	var errs []error
	for i, r := range res {
		switch {
		case r.Sandbox != nil:
			out = append(out, newSandbox(s.cfg, r.Sandbox))
		case r.Error != nil:
			errs = append(errs, fmt.Errorf("fork %d of sandbox %s: %w", i, s.ID, &client.APIError{Status: r.Error.Code, Message: r.Error.Message}))
		}
	}
	return out, errors.Join(errs...)
}

// Snapshot is a saved sandbox (memory and files) that new sandboxes
// start from: pass its ID as CreateOptions.Template.
type Snapshot struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// CreateSnapshot saves the running sandbox under name ("" for an unnamed
// snapshot); the sandbox keeps running.
func (s *Sandbox) CreateSnapshot(ctx context.Context, name string) (*Snapshot, error) {
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	var out Snapshot
	body := map[string]string{}
	if name != "" {
		body["name"] = name
	}
	if _, _, err := s.api.Do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(s.ID)+"/snapshots", body, &out); err != nil {
		return nil, fmt.Errorf("snapshot sandbox %s: %w", s.ID, err)
	}
	return &out, nil
}

// SnapshotListOptions filter and page ListSnapshots.
type SnapshotListOptions struct {
	Config
	// SandboxID keeps the snapshots of this sandbox.
	SandboxID string
	// Name keeps the snapshots with this alias or alias:tag.
	Name      string
	Limit     int
	NextToken string
}

// ListSnapshots returns one page of snapshots, newest first, and the
// token of the next page ("" after the last).
func ListSnapshots(ctx context.Context, o SnapshotListOptions) ([]Snapshot, string, error) {
	cfg, err := o.Config.resolve()
	if err != nil {
		return nil, "", err
	}
	q := url.Values{}
	for k, v := range map[string]string{"sandboxID": o.SandboxID, "name": o.Name, "nextToken": o.NextToken} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	ctx, cancel := cfg.withTimeout(ctx)
	defer cancel()
	var out []Snapshot
	h, _, err := cfg.api().Do(ctx, http.MethodGet, "/snapshots?"+q.Encode(), nil, &out)
	if err != nil {
		return nil, "", fmt.Errorf("list snapshots: %w", err)
	}
	return out, h.Get("X-Next-Token"), nil
}

// DeleteSnapshot deletes the snapshot id; false when there was none.
func DeleteSnapshot(ctx context.Context, id string, cfg Config) (bool, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return false, err
	}
	ctx, cancel := cfg.withTimeout(ctx)
	defer cancel()
	_, _, err = cfg.api().Do(ctx, http.MethodDelete, "/templates/"+url.PathEscape(id), nil, nil)
	if client.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return true, nil
}

// NetworkUpdate changes a running sandbox's outbound rules.
type NetworkUpdate = client.NetworkUpdate

// UpdateNetwork replaces the sandbox's outbound allow and deny lists (and
// the other fields set in u).
func (s *Sandbox) UpdateNetwork(ctx context.Context, u NetworkUpdate) error {
	ctx, cancel := s.cfg.withTimeout(ctx)
	defer cancel()
	if _, _, err := s.api.Do(ctx, http.MethodPut, "/sandboxes/"+url.PathEscape(s.ID)+"/network", u, nil); err != nil {
		return fmt.Errorf("update network of sandbox %s: %w", s.ID, err)
	}
	return nil
}
