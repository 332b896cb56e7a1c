package apiserver_test

import (
	"context"
	"testing"

	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/pkg/client"
)

func TestSandboxDetailHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	c := e.client(e.key2)
	sb := e.create(e.key2, client.NewSandbox{})
	for _, tc := range []struct {
		set  nodeapi.Health
		want string
	}{
		{"", "unknown"},
		{nodeapi.HealthHealthy, "healthy"},
		{nodeapi.HealthUnhealthy, "unhealthy"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			e.node.SetHealth(sb.SandboxID, tc.set)
			d, err := c.Get(ctx, sb.SandboxID)
			if err != nil {
				t.Fatal(err)
			}
			if d.Health != tc.want {
				t.Errorf("health = %q, want %q", d.Health, tc.want)
			}
		})
	}
	t.Run("paused has none", func(t *testing.T) {
		if _, err := c.Pause(ctx, sb.SandboxID); err != nil {
			t.Fatal(err)
		}
		d, err := c.Get(ctx, sb.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Health != "" {
			t.Errorf("paused sandbox health = %q, want none", d.Health)
		}
	})
}
