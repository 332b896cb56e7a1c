// Package store is the control plane's persistent state: teams, API keys,
// sandboxes and their lifecycle events.
//
// One interface, Store, has two implementations over database/sql: SQLite
// (pure Go, modernc.org/sqlite, the embedded default) and Postgres (pgx).
// Both apply versioned migrations on open. Nothing the control plane needs
// after a restart lives anywhere else: a sandbox row holds its state, its
// lifecycle epoch and its end time, so a restarted evictor re-arms every
// deadline from here.
package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Store is the control plane's state. Errors carry the errdefs classes:
// ErrNotFound for a missing row, ErrAlreadyExists for a duplicate key.
type Store interface {
	// CreateTeam adds a team. An ID is given once: that of an existing
	// or a deleted team is ErrAlreadyExists.
	CreateTeam(ctx context.Context, t *Team) error
	// GetTeam returns a team by ID.
	GetTeam(ctx context.Context, id string) (*Team, error)
	// ListTeams returns every team, oldest first.
	ListTeams(ctx context.Context) ([]*Team, error)
	// UpdateTeam reads the team, lets fn change its name and limits and
	// writes it back in one transaction (the ID and creation time stay).
	UpdateTeam(ctx context.Context, id string, fn func(*Team) error) (*Team, error)
	// DeleteTeam removes a team with everything of it the store holds:
	// API keys, webhooks and deliveries, events, the rows of its killed
	// sandboxes, its templates' records. It is ErrConflict while the team
	// has sandboxes that are not killed. The ID is never given again.
	DeleteTeam(ctx context.Context, id string) error

	// CreateAPIKey adds an API key (only its hash is stored).
	CreateAPIKey(ctx context.Context, k *APIKey) error
	// APIKeyByHash finds the key whose hash is hash.
	APIKeyByHash(ctx context.Context, hash string) (*APIKey, error)
	// ListAPIKeys returns the keys of a team, or of every team when teamID
	// is empty, oldest first.
	ListAPIKeys(ctx context.Context, teamID string) ([]*APIKey, error)
	// DeleteAPIKey revokes a key.
	DeleteAPIKey(ctx context.Context, id string) error

	// CreateSandbox records a new sandbox.
	CreateSandbox(ctx context.Context, s *Sandbox) error
	// GetSandbox returns a sandbox by ID, killed ones included.
	GetSandbox(ctx context.Context, id string) (*Sandbox, error)
	// UpdateSandbox reads the sandbox, lets fn change it and writes it back
	// in one transaction. If fn returns an error nothing is written and the
	// error is returned. fn must not call the store.
	UpdateSandbox(ctx context.Context, id string, fn func(*Sandbox) error) (*Sandbox, error)
	// ListSandboxes returns the sandboxes matching f, ordered by start time
	// then ID (ascending).
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]*Sandbox, error)
	// CreateSandboxWithin records a new sandbox unless its team already
	// has limit or more sandboxes in states (ErrExhausted). The count and
	// the insert are one transaction, serialized per team across every
	// process using the database, so API replicas together keep a team's
	// limit.
	CreateSandboxWithin(ctx context.Context, s *Sandbox, limit int, states ...sandbox.State) error
	// RecordSandbox is CreateSandboxWithin that also records event ev
	// (nil for none) in the same transaction; a limit of 0 or less counts
	// nothing. A sandbox and its first event are stored together or not at
	// all. A create of one store write records its sandbox with it,
	// already running (internal/lifecycle/create.go).
	RecordSandbox(ctx context.Context, s *Sandbox, ev *Event, limit int, states ...sandbox.State) error
	// CountSandboxes counts a team's sandboxes in the given states.
	CountSandboxes(ctx context.Context, teamID string, states ...sandbox.State) (int, error)
	// DeleteSandbox removes a sandbox row and its events (used for rows of
	// killed sandboxes past retention).
	DeleteSandbox(ctx context.Context, id string) error

	// TransitionSandbox is UpdateSandbox that also records the event fn
	// returns (nil for none) in the same transaction, with an outbox row
	// per matching webhook of the sandbox's team: a state change and its
	// event are stored together or not at all.
	TransitionSandbox(ctx context.Context, id string, fn func(*Sandbox) (*Event, error)) (*Sandbox, error)

	// AppendEvent records a lifecycle event and, in the same transaction,
	// an outbox row per enabled webhook of its team whose filter matches;
	// it sets e.ID and e.UID.
	AppendEvent(ctx context.Context, e *Event) error
	// ListEvents returns the events of one sandbox, oldest first.
	ListEvents(ctx context.Context, sandboxID string) ([]*Event, error)
	// QueryEvents returns the events matching f (see EventFilter).
	QueryEvents(ctx context.Context, f EventFilter) ([]*Event, error)
	// GetEvent returns one event by ID.
	GetEvent(ctx context.Context, id int64) (*Event, error)
	// PruneEvents deletes the events recorded before t and their
	// deliveries; it returns how many events went.
	PruneEvents(ctx context.Context, before time.Time) (int, error)
	// PruneSandboxes deletes the rows of sandboxes killed before t (their
	// events go with the events' own retention; a killed row without a
	// kill time ages by its last update); it returns how many went.
	PruneSandboxes(ctx context.Context, before time.Time) (int, error)

	// CreateWebhook, GetWebhook, ListWebhooks, UpdateWebhook and
	// DeleteWebhook manage a team's webhooks. Get, Update and Delete of
	// another team's webhook are ErrNotFound.
	CreateWebhook(ctx context.Context, w *Webhook) error
	// CreateWebhookWithin is CreateWebhook unless the team already has
	// limit webhooks (ErrExhausted; 0: no limit), counted and inserted in
	// one transaction serialized per team.
	CreateWebhookWithin(ctx context.Context, w *Webhook, limit int) error
	GetWebhook(ctx context.Context, teamID, id string) (*Webhook, error)
	ListWebhooks(ctx context.Context, teamID string) ([]*Webhook, error)
	UpdateWebhook(ctx context.Context, w *Webhook) error
	DeleteWebhook(ctx context.Context, teamID, id string) error

	// ClaimDeliveries leases up to limit pending deliveries due at now for
	// lease (their next attempt moves to now+lease, so a crashed
	// dispatcher's claims come due again) and returns them.
	ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]*Delivery, error)
	// ClaimFairDeliveries is ClaimDeliveries that takes deliveries in
	// turn between teams (every team's first due delivery before any
	// team's second) and no more of one team than c allows.
	ClaimFairDeliveries(ctx context.Context, now time.Time, lease time.Duration, c DeliveryClaim) ([]*Delivery, error)
	// RecordAttempt stores the outcome of one attempt of a delivery.
	RecordAttempt(ctx context.Context, d *Delivery) error
	// ListDeliveries returns a webhook's deliveries, newest first.
	ListDeliveries(ctx context.Context, teamID, webhookID string, limit int) ([]*Delivery, error)
	// Redeliver makes a delivery pending again, due now.
	Redeliver(ctx context.Context, teamID, webhookID, deliveryID string) (*Delivery, error)
	// NextDeliveryAt is when the earliest pending delivery is due (zero
	// when none is pending).
	NextDeliveryAt(ctx context.Context) (time.Time, error)

	// Close releases the database.
	Close() error
}

// Team owns sandboxes and API keys, and carries the limits that apply to
// them.
type Team struct {
	ID        string
	Name      string
	CreatedAt time.Time
	Limits    Limits
}

// Limits bound what a team may ask for. Zero values mean "use the server
// default".
type Limits struct {
	// MaxConcurrent is the number of sandboxes that may be running or
	// starting at once.
	MaxConcurrent int
	// MaxTimeout is the longest TTL a sandbox may be given.
	MaxTimeout time.Duration
	// MaxVCPUs and MaxMemoryMB bound one sandbox's resources.
	MaxVCPUs    int
	MaxMemoryMB int64
	// MaxDiskMB bounds one sandbox's disk.
	MaxDiskMB int64
	// MaxPaused is the number of paused sandboxes a team may keep.
	MaxPaused int
	// MaxSnapshots is the number of snapshot templates a team may keep.
	MaxSnapshots int
	// MaxBuilds is the number of the team's template builds that run at
	// once on a node (its share of the node's build slots).
	MaxBuilds int
	// MaxWebhooks is the number of webhooks a team may register.
	MaxWebhooks int
	// MaxTemplateStorageMB bounds the disk the team's templates take:
	// their builds' trees and snapshots and the layer cache entries
	// their builds made.
	MaxTemplateStorageMB int64
	// MaxVolumes is the number of volumes a team may keep; MaxVolumeSizeMB
	// bounds one volume's size (and is the size of a volume created
	// without one); MaxVolumeStorageMB bounds the sum of the sizes of the
	// team's volumes.
	MaxVolumes         int
	MaxVolumeSizeMB    int64
	MaxVolumeStorageMB int64
}

// APIKey authenticates requests of a team. The secret itself is never
// stored, only its SHA-256 hash and a masked form for display.
type APIKey struct {
	ID        string
	TeamID    string
	Name      string
	Hash      string // hex SHA-256 of the full key
	Mask      string // e.g. "e2b_1234…abcd"
	CreatedAt time.Time
}

// Sandbox is the control plane's record of one sandbox.
type Sandbox struct {
	ID         string
	TeamID     string
	TemplateID string
	State      sandbox.State
	// Epoch increments on every start, resume and pause; results of work
	// begun under an older epoch are stale.
	Epoch      int64
	StartedAt  time.Time
	EndAt      time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
	KilledAt   time.Time // zero unless State is killed
	KillReason sandbox.KillReason
	// Spec holds the remaining, non-queried attributes.
	Spec Spec
}

// Spec is the part of a sandbox record stored as one JSON document.
type Spec struct {
	Alias              string            `json:"alias,omitempty"`
	BuildID            string            `json:"buildId,omitempty"`
	NodeID             string            `json:"nodeId,omitempty"`
	ExecutionID        string            `json:"executionId,omitempty"`
	Resources          sandbox.Resources `json:"resources"`
	Metadata           map[string]string `json:"metadata,omitempty"`
	EnvdVersion        string            `json:"envdVersion,omitempty"`
	EnvdAccessToken    string            `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string            `json:"trafficAccessToken,omitempty"`
	AutoPause          bool              `json:"autoPause,omitempty"`
	AutoPauseMemory    bool              `json:"autoPauseMemory,omitempty"`
	AutoResume         bool              `json:"autoResume,omitempty"`
	AllowInternet      *bool             `json:"allowInternet,omitempty"`
	Network            json.RawMessage   `json:"network,omitempty"` // API NetworkConfig as sent
	VolumeMounts       json.RawMessage   `json:"volumeMounts,omitempty"`
	PausedWithMemory   bool              `json:"pausedWithMemory,omitempty"`
	// PauseRefusedAt is when a node first refused to pause the sandbox in
	// its current overstay (docs/lifecycle.md §3); zero when none.
	PauseRefusedAt time.Time `json:"pauseRefusedAt,omitzero"`
	// Extra keeps fields added by later versions readable by older ones.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// SandboxFilter selects sandboxes. Empty fields match everything; killed
// sandboxes are only returned when States names StateKilled.
type SandboxFilter struct {
	TeamID       string
	States       []sandbox.State
	TemplateID   string
	StartedAfter time.Time
	// NodeID selects the sandboxes held by one node.
	NodeID string
}

// Event is one lifecycle transition of a sandbox.
type Event struct {
	ID int64
	// UID is the event's stable public ID (webhook payloads, API).
	UID         string
	SandboxID   string
	TeamID      string
	TemplateID  string
	BuildID     string
	ExecutionID string
	Type        string // created, paused, resumed, updated, checkpointed, forked, killed, ...
	Reason      sandbox.KillReason
	Epoch       int64
	At          time.Time
	Message     string
	// Data is the event's data document (stored as JSON).
	Data EventData
}

// EventData is what an event says beyond its IDs.
type EventData struct {
	// KillReason is set on killed events.
	KillReason string `json:"kill_reason,omitempty"`
	// Metadata is the sandbox's user metadata.
	Metadata map[string]string `json:"sandbox_metadata,omitempty"`
	// Execution describes the incarnation that ended or paused.
	Execution *Execution `json:"execution,omitempty"`
	// EndAt is the new end time on updated events.
	EndAt *time.Time `json:"end_at,omitempty"`
	// PausedWithMemory is set on paused events.
	PausedWithMemory *bool `json:"paused_with_memory,omitempty"`
	// SourceSandboxID is the sandbox a fork was made from (forked events
	// of the source name the copies in ForkIDs).
	SourceSandboxID string   `json:"source_sandbox_id,omitempty"`
	ForkIDs         []string `json:"fork_ids,omitempty"`
	// SnapshotID names the snapshot of a checkpointed event.
	SnapshotID string `json:"snapshot_id,omitempty"`
}

// Execution is one incarnation's resources and run time.
type Execution struct {
	StartedAt     time.Time `json:"started_at"`
	VCPUCount     int       `json:"vcpu_count"`
	MemoryMB      int64     `json:"memory_mb"`
	ExecutionTime int64     `json:"execution_time"` // milliseconds
}

// EventFilter selects events for QueryEvents. TeamID or SandboxID is
// required. Events come ordered by ID, ascending unless Desc; AfterID
// and BeforeID page through them.
type EventFilter struct {
	TeamID    string
	SandboxID string
	Types     []string
	Since     time.Time // at or after
	Until     time.Time // before
	AfterID   int64     // ID greater than (ascending pages)
	BeforeID  int64     // ID less than (descending pages)
	Desc      bool
	Limit     int // default 100
	Offset    int // events skipped after the other conditions
}

// Event types recorded by the control plane.
const (
	EventCreated      = "created"
	EventPaused       = "paused"
	EventResumed      = "resumed"
	EventUpdated      = "updated"
	EventCheckpointed = "checkpointed"
	EventForked       = "forked"
	EventKilled       = "killed"
	EventPauseRefused = "pause_refused"
	// EventTimeoutSet is what version 1 recorded for an end-time change;
	// newer servers record EventUpdated.
	EventTimeoutSet = "timeout_set"
)

// Webhook is a team's subscription to its sandboxes' events.
type Webhook struct {
	ID     string
	TeamID string
	Name   string
	URL    string
	// Events are the event types delivered (e.g. "killed"); empty means
	// every type.
	Events    []string
	Secret    string
	Enabled   bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Matches reports whether the webhook wants events of type typ.
func (w *Webhook) Matches(typ string) bool {
	if !w.Enabled {
		return false
	}
	if len(w.Events) == 0 {
		return true
	}
	for _, e := range w.Events {
		if e == typ {
			return true
		}
	}
	return false
}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed" // gave up after the retry budget
)

// Delivery is one event to be sent to one webhook (an outbox row).
// DeliveryClaim bounds what ClaimFairDeliveries takes.
type DeliveryClaim struct {
	// Limit bounds the deliveries claimed.
	Limit int
	// PerTeam bounds the deliveries of one team claimed.
	PerTeam int
	// Room, when it names a team, bounds that team's deliveries instead
	// of PerTeam (a dispatcher's room beside the team's attempts in
	// flight); 0 or less claims none of the team.
	Room map[string]int
}

type Delivery struct {
	ID          string
	WebhookID   string
	TeamID      string
	EventID     int64
	State       string
	Attempts    int
	NextAt      time.Time
	LastStatus  int
	LastError   string
	CreatedAt   time.Time
	DeliveredAt time.Time
}

// ActiveStates are the states that count towards a team's concurrency
// limit.
var ActiveStates = []sandbox.State{sandbox.StateStarting, sandbox.StateRunning, sandbox.StatePausing}

// LiveStates are the states of a sandbox that is not killed.
var LiveStates = []sandbox.State{sandbox.StateStarting, sandbox.StateRunning, sandbox.StatePausing, sandbox.StatePaused}
