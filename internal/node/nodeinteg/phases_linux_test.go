package nodeinteg

import (
	"bufio"
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-sandbox/warren/internal/netslot"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// logTap keeps the agent's log lines, for the phases the agent logs.
type logTap struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logTap) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// take returns the lines logged so far with message msg and empties the
// tap.
func (l *logTap) take(msg string) []string { return l.takeEach(msg)[0] }

// takeEach is take of several messages at once: the lines of each.
func (l *logTap) takeEach(msgs ...string) [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([][]string, len(msgs))
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for i, msg := range msgs {
			if strings.Contains(sc.Text(), `msg="`+msg+`"`) {
				out[i] = append(out[i], sc.Text())
			}
		}
	}
	l.b.Reset()
	return out
}

var phaseRE = regexp.MustCompile(`\bphase_([a-z_]+)=([0-9.]+[a-zµ]+)`)

// reportPhases reports the phase_<name> durations of lines (the agent's
// log lines of one kind of operation) as <op>-<name>-p50-ms and -p99-ms,
// in the order the agent logs them.
func reportPhases(b *testing.B, op string, lines []string) {
	b.Helper()
	var order []string
	by := map[string][]time.Duration{}
	for _, line := range lines {
		for _, m := range phaseRE.FindAllStringSubmatch(line, -1) {
			d, err := time.ParseDuration(m[2])
			if err != nil {
				b.Fatalf("phase %s=%s: %v", m[1], m[2], err)
			}
			if !slices.Contains(order, m[1]) {
				order = append(order, m[1])
			}
			by[m[1]] = append(by[m[1]], d)
		}
	}
	if len(order) == 0 {
		b.Fatalf("%s: no log lines with phases", op)
	}
	for _, ph := range order {
		report(b, op+"-"+ph, by[ph])
	}
}

// BenchmarkClaimPhases: a warm pool claim piece by piece, the way the API
// does it (Reserve, then Create with the member's ID, internet on): the
// agent's own phases from its log line, and reserve and the whole create
// as the caller sees them. The pool (of 1) refills between claims,
// untimed, and each claimed sandbox is killed, untimed.
//
//	go test -run '^$' -bench ClaimPhases -benchtime 20x ./internal/node/nodeinteg/
func BenchmarkClaimPhases(b *testing.B) {
	h := newHost(b)
	tap := &logTap{}
	h.logs = tap
	a, _ := h.agent()
	defer a.Close()
	ctx := context.Background()
	req := h.createReq("unused")
	req.Network = netslot.Policy{Internet: true}
	if err := a.SetPool(ctx, req.Template, req.Resources, 1); err != nil {
		b.Fatal(err)
	}
	const msg = "sandbox created from the warm pool"
	var reserve, create []time.Duration
	var lines []string
	for b.Loop() {
		b.StopTimer()
		waitPoolReady(b, a, "base", 1)
		tap.take(msg)
		b.StartTimer()
		t0 := time.Now()
		id, ok := a.Reserve(req.Template, req.Resources)
		if !ok {
			b.Fatal("no pool member to reserve")
		}
		t1 := time.Now()
		r := req
		r.ID, r.ExecutionID, r.EnvdAccessToken = id, "e-"+id, "tok-"+id
		if _, err := a.Create(ctx, r); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		b.StopTimer()
		reserve, create = append(reserve, t1.Sub(t0)), append(create, t2.Sub(t1))
		got := tap.take(msg)
		if len(got) != 1 {
			b.Fatalf("%d claim log lines for one create (not claimed from the pool?)", len(got))
		}
		lines = append(lines, got...)
		if err := a.Kill(ctx, id, sandbox.KillRequest); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	report(b, "claim-reserve", reserve)
	report(b, "claim-create", create)
	reportPhases(b, "claim", lines)
}

// BenchmarkClaimDuringRefill: claim → first command (`true` through
// envd) from a pool of 2, once with the host quiet and once while the
// pool refills the member claimed just before (its runsc start under
// way, in the background at a low CPU weight), in the same run. The gap
// between the two is what a refill takes from a claim.
//
//	go test -run '^$' -bench ClaimDuringRefill -benchtime 10x ./internal/node/nodeinteg/
func BenchmarkClaimDuringRefill(b *testing.B) {
	h := newHost(b)
	a, _ := h.agent()
	defer a.Close()
	ctx := context.Background()
	req := h.createReq("unused")
	req.Network = netslot.Policy{Internet: true}
	if err := a.SetPool(ctx, req.Template, req.Resources, 2); err != nil {
		b.Fatal(err)
	}
	tti := func() time.Duration {
		t0 := time.Now()
		sb := claim(b, a, req)
		if _, code := run(b, sb, "tok-"+sb.ID, "true"); code != 0 {
			b.Fatalf("true exited %d", code)
		}
		d := time.Since(t0)
		b.StopTimer()
		if err := a.Kill(ctx, sb.ID, sandbox.KillRequest); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		return d
	}
	var quiet, busy []time.Duration
	for b.Loop() {
		b.StopTimer()
		waitPoolReady(b, a, "base", 2)
		b.StartTimer()
		quiet = append(quiet, tti())
		b.StopTimer()
		// The pool starts a replacement at its next tick.
		for a.Pools()["base"].Making == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		b.StartTimer()
		busy = append(busy, tti())
	}
	report(b, "tti-quiet", quiet)
	report(b, "tti-refilling", busy)
}
