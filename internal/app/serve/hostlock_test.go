package serve

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/app/apirole"
	"github.com/warren-sandbox/warren/internal/app/noderole"
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
			done <- Run(ctx, app.Options{Logger: quiet, Out: io.Discard}, Config{Host: noderole.Host{Driver: "fake", DataDir: dir},
				Settings: apirole.Settings{Listen: "127.0.0.1:0", Ready: func(a string) { ready <- a }}})
		}()
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("first server: %v", err)
		case <-time.After(time.Minute):
			t.Fatal("first server not ready")
		}
		err := Run(context.Background(), app.Options{Logger: quiet, Out: io.Discard}, Config{Host: noderole.Host{Driver: "fake", DataDir: dir},
			Settings: apirole.Settings{Listen: "127.0.0.1:0"}})
		if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "--data-dir") {
			t.Errorf("second server on the same data dir: %v", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("first server: %v", err)
		}
	})
	t.Run("same table", func(t *testing.T) {
		first := noderole.Host{Driver: "runsc", DataDir: t.TempDir(), Net: netslot.Config{Table: "warren-locktest-a", IfPrefix: "lka"}, CgroupRoot: "warren-locktest-a"}
		held := lockHost(t, first)
		defer held.Close()
		second := Config{Host: noderole.Host{Driver: "runsc", DataDir: t.TempDir(), Net: netslot.Config{Table: "warren-locktest-a", IfPrefix: "lkb"},
			CgroupRoot: "warren-locktest-b"}, Settings: apirole.Settings{Listen: "127.0.0.1:0"}}
		err := Run(context.Background(), app.Options{Logger: quiet, Out: io.Discard}, second)
		if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "--nft-table") {
			t.Errorf("second server on the same table: %v", err)
		}
	})
	t.Run("same netns dir", func(t *testing.T) {
		first := noderole.Host{Driver: "runsc", DataDir: t.TempDir(), Net: netslot.Config{Table: "wnode-locktest-a", IfPrefix: "lka", NetNSDir: "/run/wnode-locktest/netns"}, CgroupRoot: "wnode-locktest-a"}
		held := lockHost(t, first)
		defer held.Close()
		// Everything else apart, the node's netns dir is another node's
		// default one, or the first one's.
		for _, dir := range []string{"/run/wnode-locktest/netns", ""} {
			second := noderole.Config{Host: noderole.Host{Driver: "runsc", DataDir: t.TempDir(), CgroupRoot: "wnode-locktest-b",
				Net: netslot.Config{Table: "wnode-locktest-b", IfPrefix: "lkb", CIDR: netip.MustParsePrefix("100.73.128.0/24"), NetNSDir: dir}},
				RPCListen: "127.0.0.1:0", ProxyListen: "127.0.0.1:0", InsecureLoopback: true}
			if dir == "" {
				third, err := hostlock.Acquire(hostlock.DefaultDir, []hostlock.Name{{Kind: "netns dir", Flag: "--netns-dir", Value: "/run/warren/wnode-locktest-b/netns"}})
				if err != nil {
					t.Fatal(err)
				}
				defer third.Release()
			}
			err := noderole.Run(context.Background(), app.Options{Logger: quiet, Out: io.Discard}, second)
			if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "--netns-dir") {
				t.Errorf("second node on netns dir %q: %v", dir, err)
			}
		}
	})
}

// lockHost takes the host names of h (its defaults filled) as a running
// server would, until the returned System is closed.
func lockHost(t *testing.T, h noderole.Host) *app.System {
	t.Helper()
	if err := h.SetDefaults(); err != nil {
		t.Fatal(err)
	}
	sys, err := app.New(app.Options{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Lock(sys); err != nil {
		sys.Close()
		t.Fatal(err)
	}
	return sys
}
