package nodeapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// A node's own kills: a sandbox the node stopped without being asked (its
// TTL backstop fired, its init exited, a limit ended it, it was found
// stopped after a restart of the node) is a kill the control plane did
// not see happen, and may not hear of at once (it may be down). The node
// keeps each one, with its reason and time, until the control plane has
// recorded it (KillReporter); meanwhile every call about that sandbox
// answers a KilledError, so a control plane that looks before the report
// reaches it records the node's reason and time, not a guess of its own
// (timeout, node_lost).

// KilledError says that the node killed the sandbox on its own, as Kill
// tells. It is ErrNotFound: the sandbox is gone.
type KilledError struct {
	Kill Event
}

func (e *KilledError) Error() string {
	return fmt.Sprintf("sandbox %q: killed by its node (%s at %s): %s", e.Kill.SandboxID, e.Kill.Reason.String(),
		e.Kill.At.UTC().Format(time.RFC3339Nano), errdefs.ErrNotFound)
}

// Unwrap makes a KilledError ErrNotFound.
func (e *KilledError) Unwrap() error { return errdefs.ErrNotFound }

// NodeKill returns the node's own kill that err tells of, if it is (or
// wraps) a KilledError.
func NodeKill(err error) (Event, bool) {
	var ke *KilledError
	if errors.As(err, &ke) {
		return ke.Kill, true
	}
	return Event{}, false
}

// NodeKillReasons are the reasons a node gives its own kills; a report
// or an event with another reason is recorded as unknown.
var NodeKillReasons = []sandbox.KillReason{sandbox.KillTTLBackstop, sandbox.KillOOM, sandbox.KillPidsLimit, sandbox.KillExited, ""}

// IsNodeKillReason reports whether r is one of NodeKillReasons.
func IsNodeKillReason(r sandbox.KillReason) bool {
	for _, k := range NodeKillReasons {
		if r == k {
			return true
		}
	}
	return false
}

// KillAck names one kill the control plane has recorded.
type KillAck struct {
	SandboxID   string
	ExecutionID string
}

// KillReporter is the optional part of Service that keeps the node's own
// kills until the control plane acknowledges them. Agent implements it;
// it does not cross the node RPC: the node reports its kills in its
// heartbeat (internal/nodereg), which the API acknowledges in its reply,
// so the report reaches whichever API replica hears the node.
type KillReporter interface {
	// OwnKills returns the kills the node made on its own that are not
	// acknowledged yet, oldest first: Events of type EventExited or
	// EventKilled with the sandbox's execution, the reason and the time
	// of the kill.
	OwnKills(ctx context.Context) ([]Event, error)
	// AckKills forgets the kills acks name (an ack of another execution
	// of the sandbox, or of none kept, is ignored).
	AckKills(ctx context.Context, acks []KillAck) error
}
