package serve

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/app"
	"github.com/warren-sandbox/warren/internal/app/apirole"
	"github.com/warren-sandbox/warren/internal/app/noderole"
	"github.com/warren-sandbox/warren/internal/store"
	"github.com/warren-sandbox/warren/internal/testenv"
	"github.com/warren-sandbox/warren/pkg/client"
)

// TestServeDefaultLimits runs warren serve (fake driver) with server-wide
// team limits and checks the API enforces them.
func TestServeDefaultLimits(t *testing.T) {
	t.Parallel()
	const key = "e2b_00112233445566778899aabbccddeeff00112233"
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, app.Options{Logger: testenv.Logger(t), Out: io.Discard}, Config{
			Settings: apirole.Settings{Listen: "127.0.0.1:0", APIKey: key,
				Limits: store.Limits{MaxConcurrent: 1, MaxTimeout: 10 * time.Minute},
				Ready:  func(a string) { addr <- a }},
			Host: noderole.Host{DataDir: t.TempDir(), Driver: "fake", Node: noderole.Tuning{WatchdogInterval: -1}},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("serve did not start")
	}
	c := client.New(base, key)
	long := 3600
	if _, err := c.Create(ctx, client.NewSandbox{TemplateID: "base", Timeout: &long}); err == nil || !strings.Contains(err.Error(), "cannot be greater than 600 seconds") {
		t.Errorf("create over --max-timeout: %v", err)
	}
	if _, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"}); err != nil {
		t.Fatalf("first create: %v", err)
	}
	_, err := c.Create(ctx, client.NewSandbox{TemplateID: "base"})
	if ae, ok := err.(*client.APIError); !ok || ae.Status != http.StatusTooManyRequests {
		t.Errorf("create over --max-concurrent 1: %v, want 429", err)
	}
}
