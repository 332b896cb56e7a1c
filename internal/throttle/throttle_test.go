package throttle_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-sandbox/warren/internal/throttle"
)

// TestLimiter: a client's failures spend its budget, which comes back
// with time; other clients keep theirs.
func TestLimiter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := throttle.New(throttle.Config{Burst: 3, Every: 10 * time.Second})
		for i := range 3 {
			if ok, _ := l.Allow("a"); !ok {
				t.Fatalf("failure %d refused", i)
			}
			l.Spend("a")
		}
		ok, retry := l.Allow("a")
		if ok || retry != 10*time.Second {
			t.Fatalf("after 3 failures: allowed %t, retry %v; want refused, 10s", ok, retry)
		}
		if ok, _ := l.Allow("b"); !ok {
			t.Fatal("another client was refused")
		}
		time.Sleep(10 * time.Second)
		if ok, _ := l.Allow("a"); !ok {
			t.Fatal("a token did not come back")
		}
		// Failures of requests let in together go into debt, paid back
		// before the client is let in again.
		l.Spend("a")
		l.Spend("a")
		l.Spend("a")
		if _, retry := l.Allow("a"); retry != 30*time.Second {
			t.Fatalf("retry after a debt of 2: %v, want 30s", retry)
		}
		// Take spends only what there is.
		for i := range 3 {
			if ok, _ := l.Take("c"); !ok {
				t.Fatalf("take %d refused", i)
			}
		}
		if ok, retry := l.Take("c"); ok || retry != 10*time.Second {
			t.Fatalf("fourth take: %t %v", ok, retry)
		}
		time.Sleep(time.Hour)
		if ok, _ := l.Take("c"); !ok {
			t.Fatal("the budget never came back")
		}
	})
}

// TestLimiterMaxClients: past MaxClients the new addresses share one
// budget (memory stays bounded); addresses whose budget is whole again
// are forgotten to make room.
func TestLimiterMaxClients(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := throttle.New(throttle.Config{Burst: 1, Every: time.Minute, MaxClients: 4})
		for i := range 4 {
			l.Spend(fmt.Sprint(i))
		}
		l.Spend("new-1")
		if ok, _ := l.Allow("new-2"); ok {
			t.Fatal("a new client past the table has its own budget")
		}
		if ok, _ := l.Allow("0"); ok {
			t.Fatal("a tracked client lost its state")
		}
		time.Sleep(time.Minute)
		l.Spend("new-3") // the whole budgets are forgotten: room again
		if ok, _ := l.Allow("new-4"); !ok {
			t.Fatal("a new client shares a spent budget after the table was pruned")
		}
	})
}

func TestClient(t *testing.T) {
	t.Parallel()
	trusted, err := throttle.ParsePrefixes([]string{"10.0.0.0/8", "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := throttle.ParsePrefixes([]string{"nonsense"}); err == nil {
		t.Fatal("nonsense parsed")
	}
	for _, tc := range []struct {
		remote, xff string
		trusted     []netip.Prefix
		want        string
	}{
		{"203.0.113.5:4000", "", nil, "203.0.113.5"},
		{"203.0.113.5:4000", "198.51.100.1", nil, "203.0.113.5"},                       // not from a trusted proxy
		{"203.0.113.5:4000", "198.51.100.1", trusted, "203.0.113.5"},                   // not a trusted peer
		{"10.1.2.3:4000", "198.51.100.1", trusted, "198.51.100.1"},                     // one trusted hop
		{"10.1.2.3:4000", "6.6.6.6, 198.51.100.1, 192.0.2.1", trusted, "198.51.100.1"}, // forged left part ignored
		{"10.1.2.3:4000", "garbage, 198.51.100.1", trusted, "198.51.100.1"},
		{"10.1.2.3:4000", "", trusted, "10.1.2.3"},
		{"[2001:db8:1:2:3:4:5:6]:443", "", nil, "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:443", "", nil, "2001:db8:1:2::/64"},
		{"[::ffff:203.0.113.5]:1", "", nil, "203.0.113.5"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := throttle.Client(r, tc.trusted); got != tc.want {
			t.Errorf("Client(%s, XFF %q) = %s, want %s", tc.remote, tc.xff, got, tc.want)
		}
	}
}
