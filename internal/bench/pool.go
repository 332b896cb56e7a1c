package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/warren-sandbox/warren/pkg/client"
)

// poolStatus is one entry of GET /admin/pools.
type poolStatus struct {
	TemplateID string `json:"templateID"`
	Size       int    `json:"size"`
	Ready      int    `json:"ready"`
}

// admin returns a client for the admin routes acting on the default team,
// or nil without an admin token.
func (r *Runner) admin() *client.Client {
	if r.cfg.AdminToken == "" {
		return nil
	}
	c := client.New(r.cfg.APIURL, "")
	c.HTTP = r.hc
	c.Header.Set("X-Admin-Token", r.cfg.AdminToken)
	team := r.cfg.Team
	if team == "" {
		team = "default"
	}
	c.Header.Set("X-Team-ID", team)
	return c
}

// setPool sets the template's warm pool size (0 removes it).
func (r *Runner) setPool(ctx context.Context, size int) error {
	var st poolStatus
	_, _, err := r.admin().Do(ctx, http.MethodPut, "/admin/templates/"+url.PathEscape(r.cfg.Template)+"/pool", map[string]int{"size": size}, &st)
	if err != nil {
		return fmt.Errorf("warm pool of %q: set size %d: %w", r.cfg.Template, size, err)
	}
	return nil
}

// waitPool waits until the pool of the template has size ready members.
func (r *Runner) waitPool(ctx context.Context, size int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		var pools []poolStatus
		if _, _, err := r.admin().Do(ctx, http.MethodGet, "/admin/pools", nil, &pools); err != nil {
			return fmt.Errorf("warm pools: %w", err)
		}
		for _, p := range pools {
			if p.Ready >= size {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("warm pool of %q: not %d ready: %w", r.cfg.Template, size, ctx.Err())
		case <-tick.C:
		}
	}
}

// pooled measures time to interactive and a burst with a warm pool of
// Plan.PoolSize ready sandboxes, in a second Run. The pool refills in the
// background between sequential creates as it would in use; before the
// burst it is full again. Filling is not timed.
func (r *Runner) pooled(ctx context.Context) *Run {
	size := r.cfg.Plan.PoolSize
	if size <= 0 {
		return nil
	}
	if r.cfg.AdminToken == "" {
		r.run.WarmPool = "not measured (warm pools need --admin-token)"
		return nil
	}
	if err := r.setPool(ctx, size); err != nil {
		if unsupported(err) || isStatus(err, http.StatusNotFound) {
			r.run.WarmPool = "none (the API offers no warm pool)"
			return nil
		}
		r.note("pool", err)
		r.run.WarmPool = "none (setting a pool failed)"
		return nil
	}
	defer func() {
		if err := r.setPool(context.WithoutCancel(ctx), 0); err != nil {
			r.note("pool", err)
		}
	}()
	r.run.WarmPool = "none"
	saved := r.run
	p := &Run{Driver: r.cfg.Driver, APIURL: r.cfg.APIURL, WarmPool: fmt.Sprintf("%d", size), Pool: size}
	r.run = p
	defer func() { r.run = saved }()
	if err := r.waitPool(ctx, size); err != nil {
		r.note("pool", err)
		return p
	}
	r.step("tti+pool", func() { r.tti(ctx, r.cfg.Plan.TTIIterations) })
	if err := r.waitPool(ctx, size); err != nil {
		r.note("pool", err)
		return p
	}
	r.step("burst+pool", func() { r.burst(ctx, size) })
	return p
}

func isStatus(err error, status int) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == status
}
