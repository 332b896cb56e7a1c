package app

import (
	"context"
	"errors"
	"io"
	"net/netip"
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
	t.Run("same netns dir", func(t *testing.T) {
		first := Config{Driver: "runsc", DataDir: t.TempDir(), Net: netslot.Config{Table: "wnode-locktest-a", IfPrefix: "lka", NetNSDir: "/run/wnode-locktest/netns"}, CgroupRoot: "wnode-locktest-a"}
		if err := first.setDefaults(); err != nil {
			t.Fatal(err)
		}
		held, err := hostlock.Acquire(hostlock.DefaultDir, hostNames(first))
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		// Everything else apart, the node's netns dir is another node's
		// default one, or the first one's.
		for _, dir := range []string{"/run/wnode-locktest/netns", ""} {
			second := NodeConfig{Config: Config{Driver: "runsc", DataDir: t.TempDir(), CgroupRoot: "wnode-locktest-b", Logger: quiet, Out: io.Discard,
				Net: netslot.Config{Table: "wnode-locktest-b", IfPrefix: "lkb", CIDR: netip.MustParsePrefix("100.73.128.0/24"), NetNSDir: dir}},
				RPCListen: "127.0.0.1:0", ProxyListen: "127.0.0.1:0", InsecureLoopback: true}
			if dir == "" {
				third, err := hostlock.Acquire(hostlock.DefaultDir, []hostlock.Name{{Kind: "netns dir", Flag: "--netns-dir", Value: "/run/warren/wnode-locktest-b/netns"}})
				if err != nil {
					t.Fatal(err)
				}
				defer third.Release()
			}
			err = RunNode(context.Background(), second)
			if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "--netns-dir") {
				t.Errorf("second node on netns dir %q: %v", dir, err)
			}
		}
	})
}
