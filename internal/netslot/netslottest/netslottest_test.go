package netslottest

import (
	"context"
	"os"
	"testing"

	"github.com/warren-sandbox/warren/internal/netslot"
)

func TestNewPoolCleansUp(t *testing.T) {
	var slotNS string
	t.Run("use", func(t *testing.T) {
		p, cfg := New(t)
		if !IsTestTable(cfg.Table) {
			t.Errorf("table %q", cfg.Table)
		}
		s, err := p.Acquire(context.Background(), "netslottest", netslot.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		slotNS = s.NetNSPath // not released: cleanup must reclaim it
	})
	if slotNS == "" {
		return // skipped
	}
	if _, err := os.Stat(slotNS); err == nil {
		t.Errorf("netns %s left after cleanup", slotNS)
	}
}
