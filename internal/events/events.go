// Package events is the public face of the sandbox lifecycle events the
// control plane stores (internal/store): their JSON shape, shared by the
// events API and webhook payloads, the event-type names clients use, and
// the pruner that enforces the retention period.
//
// The JSON shape follows E2B's lifecycle events ("sandbox.lifecycle.<type>"
// types, camelCase IDs, an eventData document), so a receiver written for
// E2B reads Warren's events.
package events

import (
	"slices"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/store"
)

// TypePrefix is put before a stored event type in the public type name.
const TypePrefix = "sandbox.lifecycle."

// PayloadVersion is the version of the Payload shape.
const PayloadVersion = "v2"

// Types are the lifecycle event types a client may filter on or subscribe
// to (stored names; the public names carry TypePrefix).
var Types = []string{
	store.EventCreated, store.EventPaused, store.EventResumed, store.EventUpdated,
	store.EventCheckpointed, store.EventForked, store.EventKilled, store.EventPauseRefused,
}

// Payload is one event as the API returns it and webhooks deliver it.
type Payload struct {
	Version            string           `json:"version"`
	ID                 string           `json:"id"`
	Type               string           `json:"type"`
	EventData          *store.EventData `json:"eventData"`
	SandboxBuildID     string           `json:"sandboxBuildId"`
	SandboxExecutionID string           `json:"sandboxExecutionId"`
	SandboxID          string           `json:"sandboxId"`
	SandboxTeamID      string           `json:"sandboxTeamId"`
	SandboxTemplateID  string           `json:"sandboxTemplateId"`
	Timestamp          time.Time        `json:"timestamp"`
}

// PayloadOf renders a stored event.
func PayloadOf(e *store.Event) Payload {
	typ := e.Type
	if typ == store.EventTimeoutSet {
		typ = store.EventUpdated
	}
	data := e.Data
	return Payload{
		Version: PayloadVersion, ID: e.UID, Type: TypePrefix + typ, EventData: &data,
		SandboxBuildID: e.BuildID, SandboxExecutionID: e.ExecutionID, SandboxID: e.SandboxID,
		SandboxTeamID: e.TeamID, SandboxTemplateID: e.TemplateID, Timestamp: e.At.UTC(),
	}
}

// ParseTypes turns public or stored type names ("sandbox.lifecycle.killed"
// or "killed") into stored ones; an unknown name is ErrInvalid.
func ParseTypes(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		for part := range strings.SplitSeq(n, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			t := strings.TrimPrefix(part, TypePrefix)
			if !slices.Contains(Types, t) {
				return nil, errdefs.Publicf(errdefs.ErrInvalid, "event type %q: must be one of %s", part, strings.Join(PublicTypes(), ", "))
			}
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out, nil
}

// PublicTypes returns Types with TypePrefix.
func PublicTypes() []string {
	out := make([]string, len(Types))
	for i, t := range Types {
		out[i] = TypePrefix + t
	}
	return out
}
