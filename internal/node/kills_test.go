package node_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/driver/fake"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// killedMetric returns the node's sandbox_killed_total by kill reason.
func killedMetric(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sandbox_killed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kill_reason" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// wantNodeKill checks that err is the node's own kill of id with reason,
// at a time in [from, to].
func wantNodeKill(t *testing.T, what string, err error, id string, reason sandbox.KillReason, from, to time.Time) {
	t.Helper()
	ev, ok := nodeapi.NodeKill(err)
	if !ok || !errdefs.IsNotFound(err) {
		t.Fatalf("%s: %v, want the node's own kill (not found)", what, err)
	}
	if ev.SandboxID != id || ev.ExecutionID != "exec-"+id || ev.Reason != reason || ev.At.Before(from) || ev.At.After(to) {
		t.Fatalf("%s: kill %+v, want %s of %s between %s and %s", what, ev, reason, id, from, to)
	}
}

// TestOwnKillsKeptUntilAcknowledged: with nobody watching (the control
// plane is away) the node's backstop kills one sandbox and another's init
// exits. Both are counted on the node at once, kept with their reason and
// time across a restart of the agent, answered as the node's own kills by
// Get and Kill, and forgotten only when acknowledged with their execution.
// A kill the control plane asks for is counted with its reason and not
// kept.
func TestOwnKillsKeptUntilAcknowledged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEnv(t, fake.Config{})
		e.tune = func(c *node.Config) { c.BackstopGrace = grace; c.CountKills = true }
		a := e.start()
		start := time.Now()
		end := start.Add(time.Minute)
		e.create(a, "ttl1", func(r *nodeapi.CreateRequest) { r.EndAt = end })
		e.create(a, "exit1")
		e.create(a, "req1")
		time.Sleep(10 * time.Second)
		exitAt := time.Now()
		if err := e.fake.Exit("exit1", 3); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute + grace)
		synctest.Wait()
		if err := a.Kill(ctx, "req1", sandbox.KillRequest); err != nil {
			t.Fatal(err)
		}
		backstopAt := end.Add(grace)
		check := func(a *node.Agent) {
			t.Helper()
			kills, err := a.OwnKills(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(kills) != 2 || kills[0].SandboxID != "exit1" || kills[1].SandboxID != "ttl1" {
				t.Fatalf("own kills %+v, want exit1 then ttl1 (and not the requested kill)", kills)
			}
			if k := kills[0]; k.Type != nodeapi.EventExited || k.Reason != sandbox.KillExited || k.ExecutionID != "exec-exit1" || k.At.Before(exitAt) || k.At.After(exitAt.Add(time.Second)) {
				t.Fatalf("exit kept as %+v, at %s", k, exitAt)
			}
			if k := kills[1]; k.Type != nodeapi.EventKilled || k.Reason != sandbox.KillTTLBackstop || k.At.Before(backstopAt) || k.At.After(backstopAt.Add(time.Second)) {
				t.Fatalf("backstop kept as %+v, it fired at %s", k, backstopAt)
			}
			_, err = a.Get(ctx, "ttl1")
			wantNodeKill(t, "Get of the backstop's sandbox", err, "ttl1", sandbox.KillTTLBackstop, backstopAt, backstopAt.Add(time.Second))
			err = a.Kill(ctx, "ttl1", sandbox.KillTimeout)
			wantNodeKill(t, "Kill of the backstop's sandbox", err, "ttl1", sandbox.KillTTLBackstop, backstopAt, backstopAt.Add(time.Second))
			_, err = a.Pause(ctx, "exit1", nodeapi.PauseRequest{})
			wantNodeKill(t, "Pause of the exited sandbox", err, "exit1", sandbox.KillExited, exitAt, exitAt.Add(time.Second))
			_, err = a.Get(ctx, "req1")
			if _, ok := nodeapi.NodeKill(err); ok || !errdefs.IsNotFound(err) {
				t.Fatalf("Get of a sandbox killed on request: %v, want plain not found", err)
			}
		}
		check(a)
		if got := killedMetric(t, e.reg); got["ttl_backstop"] != 1 || got["exited"] != 1 || got["request"] != 1 {
			t.Fatalf("sandbox_killed_total on the node: %v", got)
		}
		e.assertNoHostObjects("ttl1")

		// The agent restarts: the kills are still there.
		a.Close()
		a = e.start()
		check(a)

		// Acknowledged with another execution: kept; with theirs: gone.
		if err := a.AckKills(ctx, []nodeapi.KillAck{{SandboxID: "ttl1", ExecutionID: "exec-old"}, {SandboxID: "nope", ExecutionID: "x"}}); err != nil {
			t.Fatal(err)
		}
		if kills, _ := a.OwnKills(ctx); len(kills) != 2 {
			t.Fatalf("an ack of another execution dropped a kill: %+v", kills)
		}
		if err := a.AckKills(ctx, []nodeapi.KillAck{{SandboxID: "ttl1", ExecutionID: "exec-ttl1"}}); err != nil {
			t.Fatal(err)
		}
		if kills, _ := a.OwnKills(ctx); len(kills) != 1 || kills[0].SandboxID != "exit1" {
			t.Fatalf("own kills after the ack of ttl1: %+v", kills)
		}
		if _, err := a.Get(ctx, "ttl1"); !errdefs.IsNotFound(err) {
			t.Fatalf("Get after the ack: %v", err)
		} else if _, ok := nodeapi.NodeKill(err); ok {
			t.Fatalf("Get after the ack still tells the node's kill: %v", err)
		}
		a.Close()
		a = e.start()
		if kills, _ := a.OwnKills(ctx); len(kills) != 1 || kills[0].SandboxID != "exit1" {
			t.Fatalf("own kills after the ack and a restart: %+v", kills)
		}
	})
}

// TestOwnKillFinishedAfterRestart: the agent recorded its own kill of a
// sandbox and stopped before the sandbox's objects were gone. The next
// agent does not adopt the sandbox: it finishes the kill as recorded. A
// running sandbox without a recorded kill is adopted as always.
func TestOwnKillFinishedAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	ctx := context.Background()
	a := e.start()
	e.create(a, "half1")
	e.create(a, "keep1")
	e.create(a, "dead1")
	a.Close()
	// While no agent runs, dead1's init exits.
	if err := e.fake.Exit("dead1", 1); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	rec := map[string]any{"version": 1, "kills": []map[string]any{
		{"type": "killed", "sandboxID": "half1", "executionID": "exec-half1", "reason": "ttl_backstop", "at": at},
	}}
	b, _ := json.Marshal(rec)
	writeFile(t, filepath.Join(e.dir, "kills.json"), string(b))

	a = e.start()
	if !running(t, a, "keep1") {
		t.Fatal("a sandbox without a recorded kill was not adopted")
	}
	_, err := a.Get(ctx, "half1")
	wantNodeKill(t, "Get of the sandbox whose kill was recorded", err, "half1", sandbox.KillTTLBackstop, at, at)
	e.assertNoHostObjects("half1")
	kills, _ := a.OwnKills(ctx)
	if len(kills) != 2 || kills[0].SandboxID != "half1" || kills[1].SandboxID != "dead1" || kills[1].Reason != sandbox.KillExited {
		t.Fatalf("own kills: %+v, want half1's, then dead1's exit found at the start", kills)
	}
	_, err = a.Get(ctx, "dead1")
	wantNodeKill(t, "Get of the sandbox found stopped", err, "dead1", sandbox.KillExited, kills[1].At, kills[1].At)
}

// TestKillsCountedOnlyWhenAsked: without Config.CountKills the agent
// registers no sandbox_killed_total (warren serve's control plane does,
// on the same registry).
func TestKillsCountedOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fake.Config{})
	a := e.start()
	e.create(a, "sb1")
	if err := a.Kill(context.Background(), "sb1", sandbox.KillRequest); err != nil {
		t.Fatal(err)
	}
	if got := killedMetric(t, e.reg); len(got) != 0 {
		t.Fatalf("sandbox_killed_total registered without CountKills: %v", got)
	}
}
