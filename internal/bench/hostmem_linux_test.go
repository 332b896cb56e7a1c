package bench

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseMeminfo(t *testing.T) {
	t.Parallel()
	const info = "MemTotal:       24683656 kB\nMemFree:        21237084 kB\nMemAvailable:   24107008 kB\nBroken:\n"
	tests := []struct {
		field   string
		want    float64
		wantErr string
	}{
		{"MemTotal", 24683656.0 / 1024, ""},
		{"MemAvailable", 23542, ""},
		{"SwapTotal", 0, "no SwapTotal"},
		{"Broken", 0, "no Broken"},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			t.Parallel()
			got, err := parseMeminfo([]byte(info), tt.field)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("parseMeminfo(%s) = %v, %v; want %v", tt.field, got, err, tt.want)
			}
		})
	}
}

func TestIsolation(t *testing.T) {
	t.Parallel()
	a, b := isolation(4242, 0, "runsc"), isolation(4242, 1, "runc")
	if a.cgroupRoot == b.cgroupRoot || a.cidr == b.cidr || a.nftTable == b.nftTable || a.vethPrefix == b.vethPrefix {
		t.Errorf("two servers of one run share a host object: %+v %+v", a, b)
	}
	for _, iso := range []hostIsolation{a, b, isolation(1<<22-1, 1, "runc")} {
		if n := len(iso.vethPrefix); n < 1 || n > 3 {
			t.Errorf("veth prefix %q: want 1-3 letters", iso.vethPrefix)
		}
		var o1, o2 int
		if _, err := fmtSscanf(iso.cidr, &o1, &o2); err != nil || o1 != 100 || o2 < 64 || o2 > 127 {
			t.Errorf("cidr %q outside 100.64.0.0/10", iso.cidr)
		}
		if strings.Contains(iso.nftTable, "-") {
			t.Errorf("nft table %q", iso.nftTable)
		}
	}
}

func fmtSscanf(cidr string, o1, o2 *int) (int, error) {
	return fmt.Sscanf(cidr, "%d.%d.0.0/16", o1, o2)
}
