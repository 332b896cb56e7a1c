// Package netslottest gives tests of other packages a real network slot
// pool of their own: a random /24 inside 100.80.0.0/12, its own nftables
// table and interface prefix, so that it never touches a node agent's pool
// or another test's, and everything it made is removed at the end.
package netslottest

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// Config returns a pool configuration unique to this test run: a /24 not
// on any host interface, a table "warren-test-<random>", a random
// three-letter interface prefix starting with "t", and a namespace
// directory of its own.
func Config() netslot.Config {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	var cidr netip.Prefix
	for range 32 {
		cidr = netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(80 + rand.IntN(16)), byte(rand.IntN(256)), 0}), 24)
		if !onHost(cidr) {
			break
		}
	}
	table := testenv.Name("warren-test-")
	return netslot.Config{
		CIDR:     cidr,
		Table:    table,
		IfPrefix: "t" + string(letters[rand.IntN(26)]) + string(letters[rand.IntN(26)]),
		NetNSDir: "/run/warren/" + table + "/netns",
	}
}

func onHost(p netip.Prefix) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP.To4()); ok && p.Contains(ip) {
				return true
			}
		}
	}
	return false
}

// New returns a pool with Config(). It skips the test without root (fails
// under CI=true), and at cleanup reclaims every object of the pool and
// deletes its table.
func New(t testing.TB) (netslot.Pool, netslot.Config) {
	t.Helper()
	testenv.NeedRoot(t, "network slots")
	cfg := Config()
	log := testenv.Logger(t)
	p, err := netslot.NewPool(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A fresh pool knows no live slot: everything of the table goes.
		fresh, err := netslot.NewPool(cfg, log)
		if err != nil {
			t.Errorf("netslottest cleanup: %v", err)
			return
		}
		if _, err := fresh.ReclaimLeaked(context.Background(), nil); err != nil {
			t.Errorf("netslottest cleanup: %v", err)
		}
		if err := netslot.DeleteTable(cfg); err != nil {
			t.Errorf("netslottest cleanup: %v", err)
		}
	})
	return p, cfg
}

// IsTestTable reports whether an nftables table name is one Config makes.
func IsTestTable(name string) bool { return strings.HasPrefix(name, "warren-test-") }
