package app

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/hostlock"
	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/testenv"
)

// A second server on names the first holds refuses to start, before it
// touches anything of the first one's (its data dir, or for a real
// driver its cgroup root, table, interface prefix and address range).
func TestSecondInstanceRefused(t *testing.T) {
	quiet := testenv.Logger(t)
	t.Run("same data dir", func(t *testing.T) {
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ready := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Config{Driver: "fake", DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet, Out: io.Discard,
				Ready: func(a string) { ready <- a }})
		}()
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("first server: %v", err)
		case <-time.After(time.Minute):
			t.Fatal("first server not ready")
		}
		err := Run(context.Background(), Config{Driver: "fake", DataDir: dir, Listen: "127.0.0.1:0", Logger: quiet, Out: io.Discard})
		if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "--data-dir") {
			t.Errorf("second server on the same data dir: %v", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("first server: %v", err)
		}
	})
	t.Run("same table", func(t *testing.T) {
		first := Config{Driver: "runsc", DataDir: t.TempDir(), Net: netslot.Config{Table: "warren-locktest-a", IfPrefix: "lka"}, CgroupRoot: "warren-locktest-a"}
		if err := first.setDefaults(); err != nil {
			t.Fatal(err)
		}
		held, err := hostlock.Acquire(hostlock.DefaultDir, hostNames(first))
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		second := Config{Driver: "runsc", DataDir: t.TempDir(), Net: netslot.Config{Table: "warren-locktest-a", IfPrefix: "lkb"},
			CgroupRoot: "warren-locktest-b", Listen: "127.0.0.1:0", Logger: quiet, Out: io.Discard}
		err = Run(context.Background(), second)
		if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "--nft-table") {
			t.Errorf("second server on the same table: %v", err)
		}
	})
}
