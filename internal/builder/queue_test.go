package builder

import (
	"context"
	"errors"
	"testing"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

func granted(tk *ticket) bool {
	select {
	case <-tk.granted:
		return true
	default:
		return false
	}
}

// TestBuildQueueShares: a team runs no more builds than its share while
// another team waits, and a freed slot goes to the next team in turn.
func TestBuildQueueShares(t *testing.T) {
	t.Parallel()
	q := newBuildQueue(2, 10)
	var a []*ticket
	for range 4 {
		tk, err := q.enqueue("a", 1)
		if err != nil {
			t.Fatal(err)
		}
		a = append(a, tk)
	}
	if !granted(a[0]) || granted(a[1]) {
		t.Fatalf("team a with a share of 1: granted %v %v", granted(a[0]), granted(a[1]))
	}
	b, _ := q.enqueue("b", 1)
	c, _ := q.enqueue("c", 1)
	if !granted(b) || granted(c) {
		t.Fatalf("team b beside team a: %v; team c with both slots taken: %v", granted(b), granted(c))
	}
	// a's slot frees: c is next in turn, not a's second build.
	q.release("a")
	if !granted(c) || granted(a[1]) {
		t.Fatalf("after a's release: c %v, a[1] %v", granted(c), granted(a[1]))
	}
	q.release("b")
	if !granted(a[1]) {
		t.Fatal("after b's release a's second build waits")
	}
	if running, waiting := q.stats(); running != 2 || waiting != 2 {
		t.Fatalf("stats: %d running, %d waiting", running, waiting)
	}
}

// TestBuildQueueRoundRobin: one slot, teams served in turn.
func TestBuildQueueRoundRobin(t *testing.T) {
	t.Parallel()
	q := newBuildQueue(1, 10)
	type entry struct {
		team string
		tk   *ticket
	}
	var all []entry
	for _, team := range []string{"a", "a", "a", "b", "b", "c"} {
		tk, err := q.enqueue(team, 5)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, entry{team, tk})
	}
	var order []string
	for range all {
		for _, e := range all {
			if granted(e.tk) && e.team != "" {
				order = append(order, e.team)
				q.release(e.team)
				e.tk.granted = make(chan struct{}) // served
				break
			}
		}
	}
	if got, want := order, []string{"a", "b", "c", "a", "b", "a"}; !equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBuildQueueBoundAndCancel: a team queues at most its bound; a build
// whose context ends leaves the queue, and one granted meanwhile gives
// its slot back.
func TestBuildQueueBoundAndCancel(t *testing.T) {
	t.Parallel()
	q := newBuildQueue(1, 2)
	first, _ := q.enqueue("a", 1)
	w1, _ := q.enqueue("a", 1)
	if _, err := q.enqueue("a", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := q.enqueue("a", 1); !errdefs.IsExhausted(err) {
		t.Fatalf("a third waiting build of a team allowed two: %v", err)
	}
	if _, err := q.enqueue("b", 1); err != nil {
		t.Fatalf("another team's build: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.wait(ctx, w1); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with an ended context: %v", err)
	}
	if err := q.wait(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	if running, waiting := q.stats(); running != 1 || waiting != 2 {
		t.Fatalf("after the cancel: %d running, %d waiting", running, waiting)
	}
	q.release("a")
	// b is next in turn; then a's remaining build.
	if running, waiting := q.stats(); running != 1 || waiting != 1 {
		t.Fatalf("after a release: %d running, %d waiting", running, waiting)
	}
}
