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
	// CreateTeam adds a team.
	CreateTeam(ctx context.Context, t *Team) error
	// GetTeam returns a team by ID.
	GetTeam(ctx context.Context, id string) (*Team, error)
	// ListTeams returns every team, oldest first.
	ListTeams(ctx context.Context) ([]*Team, error)

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
	// CountSandboxes counts a team's sandboxes in the given states.
	CountSandboxes(ctx context.Context, teamID string, states ...sandbox.State) (int, error)
	// DeleteSandbox removes a sandbox row and its events (used for rows of
	// killed sandboxes past retention).
	DeleteSandbox(ctx context.Context, id string) error

	// AppendEvent records a lifecycle event; it sets e.ID.
	AppendEvent(ctx context.Context, e *Event) error
	// ListEvents returns the events of one sandbox, oldest first.
	ListEvents(ctx context.Context, sandboxID string) ([]*Event, error)

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
	// its current overstay (LIFECYCLE-RULES §3); zero when none.
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
}

// Event is one lifecycle transition of a sandbox.
type Event struct {
	ID        int64
	SandboxID string
	TeamID    string
	Type      string // created, paused, resumed, killed, timeout_set, ...
	Reason    sandbox.KillReason
	Epoch     int64
	At        time.Time
	Message   string
}

// Event types recorded by the control plane.
const (
	EventCreated      = "created"
	EventPaused       = "paused"
	EventResumed      = "resumed"
	EventKilled       = "killed"
	EventTimeoutSet   = "timeout_set"
	EventPauseRefused = "pause_refused"
)

// ActiveStates are the states that count towards a team's concurrency
// limit.
var ActiveStates = []sandbox.State{sandbox.StateStarting, sandbox.StateRunning, sandbox.StatePausing}

// LiveStates are the states of a sandbox that is not killed.
var LiveStates = []sandbox.State{sandbox.StateStarting, sandbox.StateRunning, sandbox.StatePausing, sandbox.StatePaused}
