package apiserver

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/throttle"
)

// Failed authentications are throttled per client address (package
// throttle; docs/security.md, "Authentication throttling"): each address
// may fail Burst times, then once per Every; past that, every attempt
// with that kind of credential from it answers 429 with Retry-After,
// before the credential is looked at. Admin token and team key failures
// have separate budgets, so a tenant's guesses at the admin token from
// its own address do not stop its own key, and never touch another
// address's budget (the operator's).
const (
	AdminFailureBurst = 10
	AdminFailureEvery = 6 * time.Second // 10 a minute
	KeyFailureBurst   = 30
	KeyFailureEvery   = 2 * time.Second // 30 a minute
)

// Credential kinds, the label of api_auth_throttled_total.
const (
	credAdmin = "admin_token"
	credKey   = "api_key"
)

// authThrottle holds the budgets of failed authentications.
type authThrottle struct {
	admin, key *throttle.Limiter
	throttled  *prometheus.CounterVec
}

func newAuthThrottle(reg prometheus.Registerer) (*authThrottle, error) {
	a := &authThrottle{
		admin: throttle.New(throttle.Config{Burst: AdminFailureBurst, Every: AdminFailureEvery}),
		key:   throttle.New(throttle.Config{Burst: KeyFailureBurst, Every: KeyFailureEvery}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "api_auth_throttled_total",
			Help: "API requests refused with 429 because their address failed to authenticate too often, by credential (admin_token, api_key).",
		}, []string{"credential"}),
	}
	if reg != nil {
		if err := reg.Register(a.throttled); err != nil {
			return nil, fmt.Errorf("api metrics: %w", err)
		}
	}
	return a, nil
}

// limiter is the budget of a credential kind.
func (a *authThrottle) limiter(cred string) *throttle.Limiter {
	if cred == credAdmin {
		return a.admin
	}
	return a.key
}

// allow answers whether client may try a credential of kind cred now.
func (a *authThrottle) allow(client, cred string) error {
	ok, retry := a.limiter(cred).Allow(client)
	if ok {
		return nil
	}
	a.throttled.WithLabelValues(cred).Inc()
	return &throttledError{cred: cred, retry: retry}
}

// failed counts a failed attempt of client with a credential of kind cred.
func (a *authThrottle) failed(client, cred string) { a.limiter(cred).Spend(client) }

// throttledError is the 429 of an address that failed too often.
type throttledError struct {
	cred  string
	retry time.Duration
}

// seconds is the Retry-After of e, at least 1.
func (e *throttledError) seconds() int { return max(1, int(math.Ceil(e.retry.Seconds()))) }

func (e *throttledError) Error() string {
	what := "admin token"
	if e.cred == credKey {
		what = "API key"
	}
	return fmt.Sprintf("too many failed %s attempts from this address: retry in %d s", what, e.seconds())
}

func (e *throttledError) Unwrap() error { return errdefs.ErrExhausted }

// PublicMessage is what the client is told: Error (errdefs.Public).
func (e *throttledError) PublicMessage() string { return e.Error() }
