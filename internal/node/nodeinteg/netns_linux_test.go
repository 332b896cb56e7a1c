package nodeinteg

import (
	"context"
	"os/exec"
	"testing"

	"github.com/warren-sandbox/warren/internal/sandbox"
)

// TestIPNetnsAddBetweenCreates: an operator's or another tool's
// `ip netns add` (which makes /run/netns a mount point of its own) between
// two creates hides no sandbox's namespace: both are killed and nothing of
// them is left.
func TestIPNetnsAddBetweenCreates(t *testing.T) {
	h := newHost(t)
	a, drv := h.agent()
	defer a.Close()
	ctx := context.Background()
	var ids []string
	create := func() {
		t.Helper()
		id := "ns" + sandbox.NewID()[:10]
		ids = append(ids, id)
		t.Cleanup(func() { _ = a.Kill(context.Background(), id, sandbox.KillAdmin) })
		sb, err := a.Create(ctx, h.createReq(id))
		if err != nil {
			t.Fatal(err)
		}
		if out, code := run(t, sb, "tok-"+id, "echo up"); code != 0 || out != "up\n" {
			t.Fatalf("sandbox %s: %q exit %d", id, out, code)
		}
	}
	create()
	name := "warren-nodeinteg-" + sandbox.NewID()[:8]
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	create()
	for _, id := range ids {
		if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
			t.Errorf("kill %s: %v", id, err)
		}
		if left := h.leftovers(drv, id); len(left) > 0 {
			t.Errorf("left of %s after kill: %v", id, left)
		}
	}
}
