package builder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
)

// BuildLimits bound the builds of a Service, so that no team's builds
// take more than a bounded share of the build machinery; zero fields take
// the defaults (in parentheses).
type BuildLimits struct {
	// Slots is how many builds run at once (2).
	Slots int
	// TeamBuilds is how many builds of one team run at once, its share
	// of the slots, unless the team has a limit of its own
	// (StartRequest.TeamBuilds) (half the slots, at least 1).
	TeamBuilds int
	// TeamQueue is how many builds of one team wait for a slot at most;
	// more are refused (ErrExhausted) (16).
	TeamQueue int
	// MaxSteps bounds the steps of one build (256).
	MaxSteps int
	// BuildTimeout bounds the time one build runs, from the moment it
	// has a slot (1 h); a RUN step alone is bounded by Config.StepTimeout.
	BuildTimeout time.Duration
}

// Defaults of BuildLimits.
const (
	DefaultBuildSlots   = 2
	DefaultTeamQueue    = 16
	DefaultMaxSteps     = 256
	DefaultBuildTimeout = time.Hour
	// DefaultStepTimeout bounds one RUN step (Config.StepTimeout).
	DefaultStepTimeout = 30 * time.Minute
)

func (l BuildLimits) withDefaults() BuildLimits {
	if l.Slots <= 0 {
		l.Slots = DefaultBuildSlots
	}
	if l.TeamBuilds <= 0 {
		l.TeamBuilds = max(1, l.Slots/2)
	}
	if l.TeamQueue <= 0 {
		l.TeamQueue = DefaultTeamQueue
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultMaxSteps
	}
	if l.BuildTimeout <= 0 {
		l.BuildTimeout = DefaultBuildTimeout
	}
	return l
}

// errBuildTimeout is what a build's context ending at
// BuildLimits.BuildTimeout is (buildTimeoutError is its cause).
var errBuildTimeout = errors.New("build time limit")

type buildTimeoutError struct{ d time.Duration }

func (e buildTimeoutError) Error() string {
	return fmt.Sprintf("the build did not finish within %s, the most this server allows a build", e.d)
}

func (e buildTimeoutError) Is(target error) bool {
	return target == errBuildTimeout || target == errdefs.ErrExhausted
}

// buildQueue hands out a Service's build slots fairly between teams: at
// most slots builds run at once, at most a team's own share of them for
// one team, and a freed slot goes to the team served least recently of
// those with a build waiting and room under their share (round robin
// over teams; within a team, first come first served). So one team's
// builds, however many it starts, never hold the slots another team
// waits for beyond its share, and a team with one build waiting is
// served after at most one build of each other team.
//
//	enqueue ─▶ waiting (its team's FIFO) ─grant─▶ running ─release─▶ (next grant)
//	              │ wait's ctx done
//	              ▼
//	           removed
type buildQueue struct {
	mu      sync.Mutex
	slots   int
	maxWait int // builds of one team waiting at most
	running map[string]int
	total   int
	waiting map[string][]*ticket
	// teams with builds waiting, in the order they began to wait.
	turn []string
	// served is the grant count at each team's last grant (0: never).
	served map[string]uint64
	grants uint64
}

// ticket is one build's place in the queue.
type ticket struct {
	team    string
	share   int
	granted chan struct{}
}

func newBuildQueue(slots, maxWait int) *buildQueue {
	return &buildQueue{slots: slots, maxWait: maxWait, running: map[string]int{}, waiting: map[string][]*ticket{}, served: map[string]uint64{}}
}

// enqueue puts a build of team, whose share is at most share running
// builds, in the queue; ErrExhausted when the team already has maxWait
// builds waiting. The ticket's granted channel closes when it may run.
func (q *buildQueue) enqueue(team string, share int) (*ticket, error) {
	share = max(share, 1)
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting[team]) >= q.maxWait {
		return nil, errdefs.Publicf(errdefs.ErrExhausted, "the team has %d builds waiting for a build slot, the most this server queues per team", len(q.waiting[team]))
	}
	tk := &ticket{team: team, share: share, granted: make(chan struct{})}
	if len(q.waiting[team]) == 0 {
		q.turn = append(q.turn, team)
	}
	q.waiting[team] = append(q.waiting[team], tk)
	q.dispatchLocked()
	return tk, nil
}

// wait blocks until tk may run (nil) or ctx ends (its error; tk leaves
// the queue, or gives back the slot granted meanwhile).
func (q *buildQueue) wait(ctx context.Context, tk *ticket) error {
	select {
	case <-tk.granted:
		return nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-tk.granted: // granted as ctx ended: give it back
		q.releaseLocked(tk.team)
		return ctx.Err()
	default:
	}
	w := q.waiting[tk.team]
	if i := slices.Index(w, tk); i >= 0 {
		q.waiting[tk.team] = slices.Delete(w, i, i+1)
	}
	if len(q.waiting[tk.team]) == 0 {
		delete(q.waiting, tk.team)
		q.turn = slices.DeleteFunc(q.turn, func(t string) bool { return t == tk.team })
	}
	return ctx.Err()
}

// release gives back a slot granted to a build of team.
func (q *buildQueue) release(team string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.releaseLocked(team)
}

func (q *buildQueue) releaseLocked(team string) {
	q.total--
	if q.running[team]--; q.running[team] <= 0 {
		delete(q.running, team)
	}
	q.dispatchLocked()
}

// dispatchLocked grants free slots, each to the team served least
// recently of those whose running builds are under their share.
func (q *buildQueue) dispatchLocked() {
	for q.total < q.slots {
		i := -1
		for j, team := range q.turn {
			if q.running[team] >= q.waiting[team][0].share {
				continue
			}
			if i < 0 || q.served[team] < q.served[q.turn[i]] {
				i = j
			}
		}
		if i < 0 {
			return
		}
		team := q.turn[i]
		tk := q.waiting[team][0]
		q.waiting[team] = q.waiting[team][1:]
		if len(q.waiting[team]) == 0 {
			delete(q.waiting, team)
			q.turn = slices.Delete(q.turn, i, i+1)
		}
		q.grants++
		q.served[team] = q.grants
		q.running[team]++
		q.total++
		close(tk.granted)
	}
}

// stats reports how many builds run and wait, for the metrics and tests.
func (q *buildQueue) stats() (running, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.waiting {
		waiting += len(w)
	}
	return q.total, waiting
}
