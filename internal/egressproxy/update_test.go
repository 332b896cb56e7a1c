package egressproxy_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/egressproxy"
	"github.com/warren-sandbox/warren/internal/egressproxy/egressproxytest"
	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/netslot"
)

// TestLiveUpdate: an update replaces the rules for the connections opened
// after it, and cuts the open ones to hosts it no longer allows; a
// transform's new value is used from the next request on; a slot taken
// off the proxy forwards as the lists say.
func TestLiveUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	api := e.upstream("api.test.example")
	other := e.upstream("other.test.example")
	s := e.slot(closed("api.test.example"))

	wait := egressproxytest.StartGuest(s.NetNSPath, egressproxytest.GuestOp{Op: "http", URL: "https://api.test.example/stream",
		RootsPEM: [][]byte{e.world.CA.PEM}, StreamFor: 20 * time.Second})
	// Wait for the stream to be open through the proxy.
	deadline := time.Now().Add(10 * time.Second)
	for !openTo(e, s.SandboxID, "api.test.example") {
		if time.Now().After(deadline) {
			t.Fatal("the stream never opened")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := e.pool.Update(ctx, s, closed("other.test.example")); err != nil {
		t.Fatal(err)
	}
	r, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if r.Elapsed > 15*time.Second || !strings.Contains(r.Body, "tick 0") {
		t.Fatalf("the stream to a host no longer allowed was not cut: %s after %v", r, r.Elapsed)
	}
	if r := e.get(s, "https://api.test.example/"); r.Err == "" {
		t.Errorf("after the update, the old host: %s", r)
	}
	if r := e.get(s, "https://other.test.example/"); !ok(r, "hello from other.test.example") {
		t.Errorf("after the update, the new host: %s", r)
	}
	if !hasReason(e, s.SandboxID, egressproxy.ReasonUpdated) {
		t.Errorf("the log does not say the stream was cut by the update")
	}

	// A transform's value changes for the next request.
	set := func(v string) netslot.Policy {
		return netslot.Policy{Egress: &egressrules.Rules{Hosts: []string{"api.test.example"},
			Transforms: []egressrules.Transform{{Host: "api.test.example", Headers: map[string]string{"X-Key": v}}}}}
	}
	if err := e.pool.Update(ctx, s, set("one")); err != nil {
		t.Fatal(err)
	}
	e.get(s, "https://api.test.example/")
	if err := e.pool.Update(ctx, s, set("two")); err != nil {
		t.Fatal(err)
	}
	e.get(s, "https://api.test.example/")
	reqs := api.Requests()
	if n := len(reqs); n < 2 || reqs[n-2].Header.Get("X-Key") != "one" || reqs[n-1].Header.Get("X-Key") != "two" {
		t.Fatalf("transform values: %+v", reqs)
	}

	// Off the proxy (no egress rules): the lists alone, no DNS of ours.
	if err := e.pool.Update(ctx, s, netslot.Policy{Internet: true, DenyOut: []netip.Prefix{netip.PrefixFrom(other.Addr, 32)}}); err != nil {
		t.Fatal(err)
	}
	if r := e.get(s, "https://api.test.example/", dialTo(api.Addr, "443")); !ok(r, "hello from api.test.example") {
		t.Errorf("off the proxy, an address the lists allow: %s", r)
	}
	if r := e.get(s, "https://other.test.example/", dialTo(other.Addr, "443")); r.Err == "" {
		t.Errorf("off the proxy, an address denyOut names: %s", r)
	}
}

func openTo(e *env, id, host string) bool {
	es, _ := e.px.Log(id)
	for _, x := range es {
		if x.Open && x.Host == host {
			return true
		}
	}
	return false
}

func hasReason(e *env, id, reason string) bool {
	es, _ := e.px.Log(id)
	for _, x := range es {
		if x.Reason == reason {
			return true
		}
	}
	return false
}

// TestEgressLog: the log says what the sandbox tried: host, address,
// port, decision, reason and bytes of each connection and each DNS
// question; the counters count them by decision.
func TestEgressLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	api := e.upstream("api.test.example")
	other := e.upstream("other.test.example")
	s := e.slot(closed("api.test.example"))
	e.get(s, "https://api.test.example/")
	e.get(s, "https://other.test.example/", dialTo(other.Addr, "443"))
	e.guest(s, egressproxytest.GuestOp{Op: "dns", Name: "nope.test.example"})
	es, err := e.px.Log(s.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied, dnsDenied bool
	for _, x := range es {
		switch {
		case x.Proto == "tcp" && x.Allowed && x.Host == "api.test.example" && x.Addr == api.Addr.String() && x.Port == 443 && x.BytesIn > 0 && x.BytesOut > 0 && x.Reason == egressproxy.ReasonName:
			allowed = true
		case x.Proto == "tcp" && !x.Allowed && x.Host == "other.test.example" && x.Addr == other.Addr.String() && x.Reason == egressproxy.ReasonClosed:
			denied = true
		case x.Proto == "dns" && !x.Allowed && x.Host == "nope.test.example" && x.Reason == egressproxy.ReasonDNSDenied:
			dnsDenied = true
		}
	}
	if !allowed || !denied || !dnsDenied {
		t.Fatalf("log (allowed %v, denied %v, dns denied %v):\n%+v", allowed, denied, dnsDenied, es)
	}
	if _, err := e.px.Log("no-such-sandbox"); err == nil {
		t.Fatal("a log for an unknown sandbox")
	}
	counts := map[string]float64{}
	mfs, _ := e.reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			key := mf.GetName()
			for _, l := range m.Label {
				key += "," + l.GetValue()
			}
			if m.Counter != nil {
				counts[key] += m.Counter.GetValue()
			}
		}
	}
	for _, k := range []string{"egress_connections_total,allowed,allowed_name", "egress_connections_total,denied,denied_default", "egress_dns_queries_total,denied"} {
		if counts[k] < 1 {
			t.Errorf("%s = %v (%v)", k, counts[k], counts)
		}
	}
	if counts["egress_bytes_total,in"] <= 0 {
		t.Errorf("no bytes counted: %v", counts)
	}
}
