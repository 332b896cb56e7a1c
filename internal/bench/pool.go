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
	Hits       int64  `json:"hits"`
	Misses     int64  `json:"misses"`
}

// poolCount is the template pool's claim counters at one moment; known is
// false without an admin token (or when the API has no pool routes).
type poolCount struct {
	known        bool
	hits, misses int64
}

// poolCounts reads the claim counters of the template's pool (zero when
// it has none).
func (r *Runner) poolCounts(ctx context.Context) poolCount {
	if r.admin() == nil {
		return poolCount{}
	}
	var pools []poolStatus
	if _, _, err := r.admin().Do(ctx, http.MethodGet, "/admin/pools", nil, &pools); err != nil {
		return poolCount{}
	}
	c := poolCount{known: true}
	for _, p := range pools {
		if p.TemplateID == r.cfg.Template {
			c.hits, c.misses = p.Hits, p.Misses
		}
	}
	return c
}

// since returns the claims between before and c (nil when either is
// unknown). A pool set again in between restarts its counters; the
// callers read both ends within one pool setting.
func (c poolCount) since(before poolCount) *PoolClaims {
	if !c.known || !before.known {
		return nil
	}
	return &PoolClaims{Hits: max(0, c.hits-before.hits), Misses: max(0, c.misses-before.misses)}
}

// suspendPool removes the template's warm pool, if the server keeps one
// (warren serve does for base by default), for the pass without a pool,
// and returns what sets it back to its size at the end of the run.
func (r *Runner) suspendPool(ctx context.Context) (restore func()) {
	r.origPool = 0
	if r.admin() == nil {
		return func() {}
	}
	var pools []poolStatus
	if _, _, err := r.admin().Do(ctx, http.MethodGet, "/admin/pools", nil, &pools); err != nil {
		return func() {}
	}
	for _, p := range pools {
		if p.TemplateID == r.cfg.Template && p.Size > 0 {
			r.origPool = p.Size
		}
	}
	if r.origPool == 0 {
		return func() {}
	}
	if err := r.setPool(ctx, 0); err != nil {
		r.note("pool", err)
		return func() {}
	}
	r.log.Info("bench: warm pool suspended for the pass without one", "template", r.cfg.Template, "size", r.origPool)
	return func() {
		if err := r.setPool(context.WithoutCancel(ctx), r.origPool); err != nil {
			r.note("pool", err)
		}
	}
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
// background between sequential creates as it would in use; before each
// burst it is full again: one of the pool's size, then, when Plan.Burst
// is larger, one of Plan.Burst (MetricBurstOverPool). Filling is not timed.
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
	before := r.poolCounts(ctx)
	defer func() { p.PoolClaims = r.poolCounts(ctx).since(before) }()
	r.step("tti+pool", func() { r.tti(ctx, r.cfg.Plan.TTIIterations) })
	if err := r.waitPool(ctx, size); err != nil {
		r.note("pool", err)
		return p
	}
	r.step("burst+pool", func() { r.burst(ctx, MetricBurst, size, "") })
	if n := r.cfg.Plan.Burst; n > size {
		// More creates at once than the pool holds: the pool's members,
		// then cold creates, none failing (the pool degrades to cold starts).
		if err := r.waitPool(ctx, size); err != nil {
			r.note("pool", err)
			return p
		}
		start := r.poolCounts(ctx)
		r.step(MetricBurstOverPool, func() {
			r.burst(ctx, MetricBurstOverPool, n, fmt.Sprintf("against a pool of %d", size))
		})
		if c := r.poolCounts(ctx).since(start); c != nil {
			if m := p.metric(MetricBurstOverPool); m != nil {
				m.Note += fmt.Sprintf(", %d from the pool", c.Hits)
			}
		}
	}
	return p
}

func isStatus(err error, status int) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == status
}
