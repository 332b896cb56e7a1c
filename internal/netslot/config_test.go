package netslot

import (
	"net/netip"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func TestConfigDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
		slots   int
	}{
		{name: "defaults", cfg: Config{}, slots: 16384},
		{name: "slash31", cfg: Config{CIDR: netip.MustParsePrefix("100.70.0.0/24"), SlotPrefixLen: 31}, slots: 128},
		{name: "ipv6", cfg: Config{CIDR: netip.MustParsePrefix("fd00::/64")}, wantErr: true},
		{name: "bad_slot_len", cfg: Config{SlotPrefixLen: 29}, wantErr: true},
		{name: "too_small", cfg: Config{CIDR: netip.MustParsePrefix("100.70.0.0/31")}, wantErr: true},
		{name: "too_many_slots", cfg: Config{CIDR: netip.MustParsePrefix("100.64.0.0/10")}, wantErr: true},
		{name: "bad_prefix", cfg: Config{IfPrefix: "Wr"}, wantErr: true},
		{name: "long_prefix", cfg: Config{IfPrefix: "warr"}, wantErr: true},
		{name: "v6_allowed", cfg: Config{HostAllowed: []netip.Prefix{netip.MustParsePrefix("::1/128")}}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.setDefaults()
			if (err != nil) != tc.wantErr {
				t.Fatalf("setDefaults = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !errdefs.IsInvalid(err) {
				t.Errorf("error class: %v", err)
			}
			if err == nil && tc.cfg.slots() != tc.slots {
				t.Errorf("slots = %d, want %d", tc.cfg.slots(), tc.slots)
			}
		})
	}
}

func TestAddrs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cidr        string
		bits, index int
		host, guest string
	}{
		{"100.65.0.0/16", 30, 0, "100.65.0.1", "100.65.0.2"},
		{"100.65.0.0/16", 30, 1, "100.65.0.5", "100.65.0.6"},
		{"100.65.0.0/16", 30, 16383, "100.65.255.253", "100.65.255.254"},
		{"100.65.0.0/16", 31, 3, "100.65.0.6", "100.65.0.7"},
	}
	for _, tc := range tests {
		t.Run(tc.cidr+"/"+tc.host, func(t *testing.T) {
			c := Config{CIDR: netip.MustParsePrefix(tc.cidr), SlotPrefixLen: tc.bits}
			if err := c.setDefaults(); err != nil {
				t.Fatal(err)
			}
			h, g := c.addrs(tc.index)
			if h.String() != tc.host || g.String() != tc.guest {
				t.Errorf("addrs(%d) = %s, %s", tc.index, h, g)
			}
		})
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	c := Config{IfPrefix: "abc"}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{c.hostVethName(maxSlots-1, useLimit-1), c.guestTempName(maxSlots-1, useLimit-1)} {
		if len(n) > 15 {
			t.Errorf("interface name %q longer than 15", n)
		}
	}
	for name, want := range map[string]bool{
		c.hostVethName(7, 99): true, c.guestTempName(46655, useLimit-1): true,
		"abch": false, "abcx1.2": false, "abch1": false, "abch1.": false, "abch1234.5": false, "xyzh1.2": false, "abch1.2.3": false,
	} {
		if got := c.isVethName(name); got != want {
			t.Errorf("isVethName(%q) = %v", name, got)
		}
	}
	ns := netnsName("my-sandbox", 12345)
	if id, ok := sandboxOfNetNS(ns); !ok || id != "my-sandbox" {
		t.Errorf("sandboxOfNetNS(%q) = %q, %v", ns, id, ok)
	}
	if parseBase36(tail(ns)) != 12345 {
		t.Errorf("use of %q = %d", ns, parseBase36(tail(ns)))
	}
	if _, ok := sandboxOfNetNS("other"); ok {
		t.Error("foreign namespace parsed")
	}
	tb, id, n, ok := parseAlias(c.alias("my-sandbox", ns))
	if !ok || tb != "warren" || id != "my-sandbox" || n != ns {
		t.Errorf("parseAlias = %q %q %q %v", tb, id, n, ok)
	}
	veth := c.hostVethName(7, 99)
	if id, v, ok := parseSlotChain(slotChain("my-sandbox", veth)); !ok || id != "my-sandbox" || v != veth {
		t.Errorf("parseSlotChain = %q %q %v", id, v, ok)
	}
}
