package webhooks_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/egress"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/events"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/store/storetest"
	"github.com/warren-sandbox/warren/internal/webhooks"
)

// receiver is a webhook endpoint on loopback that fails its first
// failFirst requests and records every request.
type receiver struct {
	srv       *httptest.Server
	secret    string
	failFirst int

	mu   sync.Mutex
	reqs []received
}

type received struct {
	header http.Header
	body   []byte
	status int
}

func newReceiver(t *testing.T, secret string, failFirst int) *receiver {
	r := &receiver{secret: secret, failFirst: failFirst}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		status := http.StatusNoContent
		if len(r.reqs) < r.failFirst {
			status = http.StatusServiceUnavailable
		}
		r.reqs = append(r.reqs, received{header: req.Header.Clone(), body: body, status: status})
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// allow is the operator's allow entry for the receiver's loopback
// address (warren serve --egress-allow): deliveries to it are refused
// without one.
func (r *receiver) allow() *egress.Policy {
	return egress.MustParse(strings.TrimPrefix(r.srv.URL, "http://"))
}

func (r *receiver) got() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.reqs...)
}

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func setup(t *testing.T, st store.Store, url, secret string, types ...string) *store.Webhook {
	t.Helper()
	w := &store.Webhook{ID: store.NewUID(), TeamID: "team", Name: "test", URL: url, Secret: secret, Enabled: true, Events: types}
	if err := st.CreateWebhook(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	return w
}

func killedEvent(t *testing.T, st store.Store) *store.Event {
	t.Helper()
	e := &store.Event{SandboxID: "sbx1", TeamID: "team", TemplateID: "base", BuildID: "b1", ExecutionID: "x1",
		Type: store.EventKilled, Reason: sandbox.KillTimeout,
		Data: store.EventData{Execution: &store.Execution{VCPUCount: 2, MemoryMB: 512, ExecutionTime: 1500}}}
	if err := st.AppendEvent(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestDeliverySignedAndVerified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	rcv := newReceiver(t, "s3cret", 0)
	hook := setup(t, st, rcv.srv.URL+"/hook", "s3cret")
	e := killedEvent(t, st)
	d, err := webhooks.New(webhooks.Config{Store: st, Egress: rcv.allow()})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := d.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	got := rcv.got()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests", len(got))
	}
	r := got[0]
	if err := webhooks.Verify("s3cret", r.header.Get(webhooks.HeaderSignature), r.body, 5*time.Minute, time.Now()); err != nil {
		t.Fatalf("signature does not verify: %v (header %q)", err, r.header.Get(webhooks.HeaderSignature))
	}
	if r.header.Get(webhooks.HeaderE2BSignature) != webhooks.E2BSignature("s3cret", r.body) || r.header.Get(webhooks.HeaderE2BWebhookID) != hook.ID {
		t.Fatalf("e2b headers: %v", r.header)
	}
	var p events.Payload
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != "sandbox.lifecycle.killed" || p.ID != e.UID || p.SandboxID != "sbx1" || p.SandboxTeamID != "team" ||
		p.SandboxExecutionID != "x1" || p.EventData == nil || p.EventData.KillReason != "timeout" || p.EventData.Execution.MemoryMB != 512 {
		t.Fatalf("payload %s", r.body)
	}
	tests := []struct {
		name, secret, header string
		body                 []byte
		now                  time.Time
	}{
		{"wrong secret", "other", r.header.Get(webhooks.HeaderSignature), r.body, time.Now()},
		{"tampered body", "s3cret", r.header.Get(webhooks.HeaderSignature), append([]byte(" "), r.body...), time.Now()},
		{"replayed late", "s3cret", r.header.Get(webhooks.HeaderSignature), r.body, time.Now().Add(time.Hour)},
		{"malformed", "s3cret", "v1=abc", r.body, time.Now()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := webhooks.Verify(tc.secret, tc.header, tc.body, 5*time.Minute, tc.now); err == nil {
				t.Fatal("verified")
			}
		})
	}
	ds, _ := st.ListDeliveries(ctx, "team", hook.ID, 0)
	if len(ds) != 1 || ds[0].State != store.DeliveryDelivered || ds[0].Attempts != 1 || ds[0].LastStatus != 204 {
		t.Fatalf("delivery %+v", ds[0])
	}
}

// TestRetriesThenOnce: a receiver failing three times then succeeding gets
// the event acknowledged exactly once, after backoffs of 1, 2 and 4 s.
func TestRetriesThenOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	rcv := newReceiver(t, "k", 3)
	hook := setup(t, st, rcv.srv.URL, "k", store.EventKilled)
	killedEvent(t, st)
	// An event the webhook did not subscribe to is never sent.
	if err := st.AppendEvent(ctx, &store.Event{SandboxID: "sbx1", TeamID: "team", Type: store.EventCreated}); err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Now()}
	reg := prometheus.NewRegistry()
	d, err := webhooks.New(webhooks.Config{Store: st, Now: clk.Now, Backoff: time.Second, MaxBackoff: time.Minute, MaxAttempts: 5, Registry: reg, Egress: rcv.allow()})
	if err != nil {
		t.Fatal(err)
	}
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if n, err := d.RunOnce(ctx); err != nil || n != 1 {
			t.Fatalf("attempt %d: RunOnce = %d, %v", i+1, n, err)
		}
		// Not due again before the backoff ends.
		clk.Add(wait - time.Millisecond)
		if n, _ := d.RunOnce(ctx); n != 0 {
			t.Fatalf("retried %d before the backoff of %v ended", n, wait)
		}
		clk.Add(time.Millisecond)
	}
	if n, err := d.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("fourth attempt: %d, %v", n, err)
	}
	clk.Add(time.Hour)
	if n, _ := d.RunOnce(ctx); n != 0 {
		t.Fatalf("delivered again after success: %d", n)
	}
	got := rcv.got()
	acked := 0
	for _, r := range got {
		if r.status/100 == 2 {
			acked++
		}
		if r.header.Get(webhooks.HeaderDeliveryID) != got[0].header.Get(webhooks.HeaderDeliveryID) {
			t.Fatal("delivery ID changed between attempts")
		}
	}
	if len(got) != 4 || acked != 1 {
		t.Fatalf("receiver: %d requests, %d acknowledged; want 4 and 1", len(got), acked)
	}
	ds, _ := st.ListDeliveries(ctx, "team", hook.ID, 0)
	if len(ds) != 1 || ds[0].State != store.DeliveryDelivered || ds[0].Attempts != 4 {
		t.Fatalf("deliveries %+v", ds)
	}
	for outcome, want := range map[string]float64{"retry": 3, "delivered": 1, "failed": 0} {
		if got := counter(t, reg, outcome); got != want {
			t.Errorf("webhook_delivery_attempts_total{outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
	// Redeliver sends it once more.
	if _, err := st.Redeliver(ctx, "team", hook.ID, ds[0].ID); err != nil {
		t.Fatal(err)
	}
	if n, _ := d.RunOnce(ctx); n != 1 || len(rcv.got()) != 5 {
		t.Fatalf("redeliver: %d attempted, receiver has %d", n, len(rcv.got()))
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	rcv := newReceiver(t, "k", 1000)
	hook := setup(t, st, rcv.srv.URL, "k")
	killedEvent(t, st)
	clk := &clock{now: time.Now()}
	d, _ := webhooks.New(webhooks.Config{Store: st, Now: clk.Now, Backoff: time.Second, MaxBackoff: 4 * time.Second, MaxAttempts: 6, Egress: rcv.allow()})
	for range 20 {
		d.RunOnce(ctx)
		clk.Add(4 * time.Second)
	}
	ds, _ := st.ListDeliveries(ctx, "team", hook.ID, 0)
	if len(rcv.got()) != 6 || ds[0].State != store.DeliveryFailed || ds[0].Attempts != 6 || ds[0].LastStatus != 503 {
		t.Fatalf("after the budget: %d requests, delivery %+v", len(rcv.got()), ds[0])
	}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: 4 * time.Second} {
		if got := d.BackoffAfter(n); got != want {
			t.Errorf("BackoffAfter(%d) = %v, want %v", n, got, want)
		}
	}
}

// TestLeaseSurvivesCrash: a delivery claimed by a dispatcher that died
// comes due again when the lease ends and a new dispatcher sends it.
func TestLeaseSurvivesCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	rcv := newReceiver(t, "k", 0)
	setup(t, st, rcv.srv.URL, "k")
	killedEvent(t, st)
	now := time.Now()
	if c, err := st.ClaimDeliveries(ctx, now, time.Minute, 10); err != nil || len(c) != 1 {
		t.Fatalf("claim by the dispatcher that dies: %v %v", c, err)
	}
	clk := &clock{now: now}
	d, _ := webhooks.New(webhooks.Config{Store: st, Now: clk.Now, Lease: time.Minute, Egress: rcv.allow()})
	if n, _ := d.RunOnce(ctx); n != 0 {
		t.Fatal("took a leased delivery")
	}
	clk.Add(time.Minute)
	if n, _ := d.RunOnce(ctx); n != 1 || len(rcv.got()) != 1 {
		t.Fatalf("after the lease: %d attempted, %d received", n, len(rcv.got()))
	}
}

// TestRunDelivers runs the dispatcher loop against real time.
func TestRunDelivers(t *testing.T) {
	t.Parallel()
	st := storetest.SQLite(t)
	rcv := newReceiver(t, "k", 1)
	setup(t, st, rcv.srv.URL, "k")
	d, _ := webhooks.New(webhooks.Config{Store: st, Backoff: 10 * time.Millisecond, Poll: 20 * time.Millisecond, Egress: rcv.allow()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	killedEvent(t, st)
	d.Poke()
	deadline := time.Now().Add(30 * time.Second)
	for len(rcv.got()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("receiver got %d requests in 30 s, want 2", len(rcv.got()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPrivateRefusedByDefault is the attack: a team registers a webhook on
// the host's loopback. Without the operator's allow entry it is never
// connected to, and the history says only that the policy refused it (not
// whether something listens there).
func TestPrivateRefusedByDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	rcv := newReceiver(t, "k", 0)
	hook := setup(t, st, rcv.srv.URL, "k")
	closed := setup(t, st, "http://127.0.0.1:1/", "k") // nothing listens
	killedEvent(t, st)
	d, _ := webhooks.New(webhooks.Config{Store: st, Egress: egress.MustParse("127.0.0.1:2")})
	if n, err := d.RunOnce(ctx); err != nil || n != 2 {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	if len(rcv.got()) != 0 {
		t.Fatal("a private address was reached")
	}
	var errs []string
	for _, h := range []*store.Webhook{hook, closed} {
		ds, _ := st.ListDeliveries(ctx, "team", h.ID, 0)
		if ds[0].State != store.DeliveryPending || ds[0].Attempts != 1 || !strings.Contains(ds[0].LastError, "egress policy") {
			t.Fatalf("delivery %+v", ds[0])
		}
		errs = append(errs, ds[0].LastError)
	}
	if errs[0] != errs[1] {
		t.Fatalf("a listening and a closed port read differently: %q vs %q", errs[0], errs[1])
	}
}

// TestErrorsDoNotEcho: what a receiver answers, and how a connection
// failed, stays out of the delivery history.
func TestErrorsDoNotEcho(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.SQLite(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "secret-internal-answer")
	}))
	t.Cleanup(srv.Close)
	hook := setup(t, st, srv.URL, "k")
	killedEvent(t, st)
	d, _ := webhooks.New(webhooks.Config{Store: st, Egress: egress.MustParse(strings.TrimPrefix(srv.URL, "http://"))})
	if n, err := d.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v", n, err)
	}
	ds, _ := st.ListDeliveries(ctx, "team", hook.ID, 0)
	if ds[0].LastStatus != 500 || ds[0].LastError != "receiver answered 500 Internal Server Error" {
		t.Fatalf("delivery %+v", ds[0])
	}
}

// TestURLValidator: an IP literal the policy refuses is a 400 at
// registration; the operator's entry lets it through.
func TestURLValidator(t *testing.T) {
	t.Parallel()
	v := webhooks.URLValidator(egress.MustParse("10.0.0.5:8080"))
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://example.com/hook", true},
		{"https://1.1.1.1/hook", true},
		{"http://10.0.0.5:8080/hook", true},
		{"http://10.0.0.5/hook", false},
		{"http://127.0.0.1:3000/", false},
		{"http://[::1]:3000/", false},
		{"http://[::ffff:169.254.169.254]/", false},
		{"http://169.254.169.254/latest/meta-data", false},
		{"ftp://example.com/", false},
	} {
		if err := v(tc.url); (err == nil) != tc.ok || err != nil && !errdefs.IsInvalid(err) {
			t.Errorf("validate %s = %v, want ok %t", tc.url, err, tc.ok)
		}
	}
}

// counter returns webhook_delivery_attempts_total{outcome}.
func counter(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "webhook_delivery_attempts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
