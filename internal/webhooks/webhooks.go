// Package webhooks delivers a team's sandbox lifecycle events to the URLs
// it registered.
//
// Delivery is at least once, from an outbox: the store writes one delivery
// row per matching webhook in the same transaction as the event
// (store.AppendEvent, store.TransitionSandbox). The Dispatcher leases due
// rows, POSTs the signed payload, and records the outcome: a 2xx answer
// marks the delivery delivered; anything else schedules a retry with
// exponential backoff (bounded), until MaxAttempts makes it failed. A
// leased row whose dispatcher died comes due again when its lease ends, so
// pending deliveries survive restarts. Deliveries go only to the URL of the
// webhook row that the team registered.
//
// Teams share the dispatcher fairly: at most Concurrency attempts run at
// once, at most TeamConcurrency of one team, and free room is claimed in
// turn between teams (store.ClaimFairDeliveries). A team whose receivers
// are slow (or never answer, up to Timeout) holds its own share only; the
// other teams' deliveries go out beside its attempts.
//
//	pending ──2xx──▶ delivered
//	   │ ▲
//	   │ └── error, attempts < MaxAttempts (after backoff)
//	   └──── error, attempts = MaxAttempts ──▶ failed
//	delivered / failed ──redeliver──▶ pending
package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/events"
	"github.com/warren-sandbox/warren/internal/store"
)

// Config configures a Dispatcher. Store is required.
type Config struct {
	Store  store.Store
	Logger *slog.Logger
	// Egress is the operator's allow-list for webhook destinations on
	// loopback, private and other non-public addresses; every delivery
	// connects through egress's guarded dialer, which refuses them by
	// default (nil: no exceptions).
	Egress *egress.Policy
	// Timeout bounds one attempt (default 10 s).
	Timeout time.Duration
	// MaxAttempts is how many attempts a delivery gets before it is failed
	// (default 10).
	MaxAttempts int
	// Backoff is the wait after the first failed attempt, doubled after
	// each further one up to MaxBackoff (defaults 5 s and 10 min).
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Poll is the longest the dispatcher sleeps between looks at the
	// outbox (default 1 s); Poke wakes it sooner.
	Poll time.Duration
	// Lease is how long a claimed delivery is held before another
	// dispatcher may take it (default 30 s; at least twice Timeout).
	Lease time.Duration
	// Concurrency bounds the attempts in flight (default 8).
	Concurrency int
	// TeamConcurrency bounds the attempts in flight of one team (default
	// 2, at most Concurrency).
	TeamConcurrency int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Registry receives webhook_delivery_attempts_total{outcome} (outcome
	// delivered, retry or failed); nil registers nothing.
	Registry prometheus.Registerer
}

// Dispatcher sends pending deliveries. Create it with New and run it with
// Run.
type Dispatcher struct {
	cfg    Config
	client *http.Client
	st     store.Store
	log    *slog.Logger
	wake   chan struct{}

	// inFlight counts the attempts running, per team and in all.
	mu       sync.Mutex
	inFlight map[string]int
	total    int
	running  sync.WaitGroup

	attempts *prometheus.CounterVec
}

// New returns a Dispatcher.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("webhooks: store is required: %w", errdefs.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	tr := (&egress.Dialer{Policy: cfg.Egress, Timeout: cfg.Timeout}).Transport()
	client := &http.Client{Timeout: cfg.Timeout, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // deliver only to the registered URL
	}}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 10
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 5 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Lease <= cfg.Timeout {
		cfg.Lease = 2 * cfg.Timeout
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.TeamConcurrency <= 0 {
		cfg.TeamConcurrency = 2
	}
	cfg.TeamConcurrency = min(cfg.TeamConcurrency, cfg.Concurrency)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Dispatcher{cfg: cfg, client: client, st: cfg.Store, log: cfg.Logger, wake: make(chan struct{}, 1), inFlight: map[string]int{},
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_delivery_attempts_total",
			Help: "Webhook delivery attempts, by outcome (delivered, retry, failed).",
		}, []string{"outcome"}),
	}
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(d.attempts); err != nil {
			return nil, fmt.Errorf("webhooks metrics: %w", err)
		}
	}
	return d, nil
}

// Poke makes the dispatcher look at the outbox now (after an event).
func (d *Dispatcher) Poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// BackoffAfter returns the wait after the n-th failed attempt (n ≥ 1).
func (d *Dispatcher) BackoffAfter(n int) time.Duration {
	b := d.cfg.Backoff
	for i := 1; i < n && b < d.cfg.MaxBackoff; i++ {
		b *= 2
	}
	return min(b, d.cfg.MaxBackoff)
}

// Run delivers until ctx ends, then waits for the attempts in flight.
func (d *Dispatcher) Run(ctx context.Context) {
	defer d.running.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-d.wake:
		}
		if _, err := d.dispatch(ctx, nil); err != nil && ctx.Err() == nil {
			d.log.Warn("webhook outbox", "error", err)
		}
		wait := d.cfg.Poll
		if next, err := d.st.NextDeliveryAt(ctx); err == nil && !next.IsZero() {
			wait = min(wait, max(next.Sub(d.cfg.Now()), 0))
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// RunOnce claims the deliveries due now that there is room for, attempts
// each once and records the outcomes. It returns how many it attempted.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	var wg sync.WaitGroup
	n, err := d.dispatch(ctx, &wg)
	wg.Wait()
	return n, err
}

// dispatch claims due deliveries for the room left (Concurrency in all,
// TeamConcurrency per team) and starts an attempt of each; an attempt
// that ends makes room and pokes the dispatcher. Each started attempt is
// added to wg too, when set.
func (d *Dispatcher) dispatch(ctx context.Context, wg *sync.WaitGroup) (int, error) {
	d.mu.Lock()
	c := store.DeliveryClaim{Limit: d.cfg.Concurrency - d.total, PerTeam: d.cfg.TeamConcurrency, Room: map[string]int{}}
	for team, n := range d.inFlight {
		c.Room[team] = d.cfg.TeamConcurrency - n
	}
	d.mu.Unlock()
	if c.Limit <= 0 {
		return 0, nil
	}
	due, err := d.st.ClaimFairDeliveries(ctx, d.cfg.Now(), d.cfg.Lease, c)
	for _, dl := range due {
		d.mu.Lock()
		d.inFlight[dl.TeamID]++
		d.total++
		d.mu.Unlock()
		if wg != nil {
			wg.Add(1)
		}
		d.running.Go(func() {
			defer func() {
				d.mu.Lock()
				if d.inFlight[dl.TeamID]--; d.inFlight[dl.TeamID] <= 0 {
					delete(d.inFlight, dl.TeamID)
				}
				d.total--
				d.mu.Unlock()
				if wg != nil {
					wg.Done()
				}
				d.Poke()
			}()
			d.attempt(ctx, dl)
		})
	}
	return len(due), err
}

func (d *Dispatcher) attempt(ctx context.Context, dl *store.Delivery) {
	log := d.log.With("webhook_id", dl.WebhookID, "delivery_id", dl.ID, "team_id", dl.TeamID, "event_id", dl.EventID)
	hook, err := d.st.GetWebhook(ctx, dl.TeamID, dl.WebhookID)
	if err != nil {
		if errdefs.IsNotFound(err) {
			d.finish(ctx, log, dl, 0, "webhook deleted", true)
		} else {
			log.Warn("webhook delivery: read webhook", "error", err)
		}
		return
	}
	ev, err := d.st.GetEvent(ctx, dl.EventID)
	if err != nil {
		if errdefs.IsNotFound(err) {
			d.finish(ctx, log, dl, 0, "event pruned", true)
		} else {
			log.Warn("webhook delivery: read event", "error", err)
		}
		return
	}
	log = log.With("sandbox_id", ev.SandboxID, "event", ev.Type)
	if ev.Type == store.EventKilled {
		log = log.With("kill_reason", ev.Reason.String())
	}
	body, err := json.Marshal(events.PayloadOf(ev))
	if err != nil {
		d.finish(ctx, log, dl, 0, "encode payload: "+err.Error(), true)
		return
	}
	status, aerr := d.post(ctx, hook, dl, ev, body)
	if ctx.Err() != nil {
		return // shutting down: the lease runs out and the delivery comes due again
	}
	if aerr == nil {
		dl.Attempts++
		dl.State, dl.LastStatus, dl.LastError, dl.DeliveredAt = store.DeliveryDelivered, status, "", d.cfg.Now()
		if err := d.st.RecordAttempt(context.WithoutCancel(ctx), dl); err != nil {
			log.Warn("webhook delivery: record success", "error", err)
			return
		}
		d.attempts.WithLabelValues("delivered").Inc()
		log.Info("webhook delivered", "attempts", dl.Attempts, "status", status)
		return
	}
	// The team reads LastError in its delivery history: it says what
	// kind of failure it was (the receiver's status, refused by the
	// egress policy, no connection), never more, so the history cannot
	// map what the host reaches. The log keeps the detail.
	msg := egress.Describe(aerr)
	var se *statusError
	if errors.As(aerr, &se) {
		msg = se.Error()
	}
	log.Debug("webhook attempt failed", "error", aerr)
	d.finish(ctx, log, dl, status, msg, false)
}

// statusError is a receiver's non-2xx answer.
type statusError struct{ status string }

func (e *statusError) Error() string { return "receiver answered " + e.status }

// finish records a failed attempt: a retry after backoff, or failed for
// good when final or out of attempts.
func (d *Dispatcher) finish(ctx context.Context, log *slog.Logger, dl *store.Delivery, status int, msg string, final bool) {
	dl.Attempts++
	dl.LastStatus, dl.LastError = status, msg
	if final || dl.Attempts >= d.cfg.MaxAttempts {
		dl.State = store.DeliveryFailed
		d.attempts.WithLabelValues("failed").Inc()
		log.Warn("webhook delivery failed for good", "attempts", dl.Attempts, "status", status, "error", msg)
	} else {
		wait := d.BackoffAfter(dl.Attempts)
		dl.State, dl.NextAt = store.DeliveryPending, d.cfg.Now().Add(wait)
		d.attempts.WithLabelValues("retry").Inc()
		log.Info("webhook delivery attempt failed, will retry", "attempts", dl.Attempts, "retry_in", wait, "status", status, "error", msg)
	}
	if err := d.st.RecordAttempt(context.WithoutCancel(ctx), dl); err != nil {
		log.Warn("webhook delivery: record attempt", "error", err)
	}
}

func (d *Dispatcher) post(ctx context.Context, hook *store.Webhook, dl *store.Delivery, ev *store.Event, body []byte) (int, error) {
	actx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, hook.URL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("request: %w", err)
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "Warren-Webhooks/1")
	h.Set(HeaderSignature, Sign(hook.Secret, d.cfg.Now(), body))
	h.Set(HeaderWebhookID, hook.ID)
	h.Set(HeaderDeliveryID, dl.ID)
	h.Set(HeaderEventID, ev.UID)
	h.Set(HeaderE2BWebhookID, hook.ID)
	h.Set(HeaderE2BDeliveryID, dl.ID)
	h.Set(HeaderE2BSignatureVersion, "v1")
	h.Set(HeaderE2BSignature, E2BSignature(hook.Secret, body))
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, &statusError{status: resp.Status}
	}
	return resp.StatusCode, nil
}

// ValidateURL checks a webhook URL given at registration: absolute http or
// https with a host, no credentials.
func ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return errdefs.Publicf(errdefs.ErrInvalid, "webhook url %q: must be an absolute http(s) URL without credentials", raw)
	}
	return nil
}

// URLValidator returns ValidateURL that also refuses, at once, a URL
// whose host is an IP address p refuses (a loopback or private address
// not on the operator's allow-list). Host names are checked when a
// delivery connects, on the address they resolve to then.
func URLValidator(p *egress.Policy) func(string) error {
	return func(raw string) error {
		if err := ValidateURL(raw); err != nil {
			return err
		}
		u, _ := url.Parse(raw)
		ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]"))
		if err != nil {
			return nil
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		n, _ := strconv.Atoi(port)
		if p.Check(netip.AddrPortFrom(ip, uint16(n))) != nil {
			return errdefs.Publicf(errdefs.ErrInvalid, "webhook url %q: %s", raw, egress.Describe(egress.ErrRefused))
		}
		return nil
	}
}
