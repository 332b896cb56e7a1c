package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-sandbox/warren/internal/atomicfile"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// The node's own kills (nodeapi.KillReporter): a sandbox the agent stops
// without being asked (its backstop fired, its init exited, a limit ended
// it, recover found it stopped, a pause failed half-way) is written to
// DataDir/kills.json, with its reason and the time of the kill, before its
// host objects go; the heartbeat reports it until the control plane
// acknowledges it, and until then every call about the sandbox answers
// nodeapi.KilledError. A restart of the agent keeps them: the file is
// replaced atomically and synced. A sandbox whose kill is in the file but
// whose record still says running (the agent died between the two) is not
// adopted: recover finishes the kill.
//
// Every kill the agent carries out, its own and the control plane's, is
// counted in sandbox_killed_total{kill_reason} when Config.CountKills is
// set, so a kill made while the control plane is away is counted at once.

const (
	killsFile    = "kills.json"
	killsVersion = 1
	// maxKeptKills bounds the file: past it (a node nobody acknowledges,
	// e.g. one without a control plane), the oldest kills are dropped.
	maxKeptKills = 1024
)

type killsRecord struct {
	Version int         `json:"version"`
	Kills   []killEntry `json:"kills"`
}

type killEntry struct {
	Type        nodeapi.EventType  `json:"type"`
	SandboxID   string             `json:"sandboxID"`
	ExecutionID string             `json:"executionID"`
	Reason      sandbox.KillReason `json:"reason,omitempty"`
	At          time.Time          `json:"at"`
}

// killJournal is the agent's kills.json in memory; mu serialises its
// writes, so that an older state never overwrites a newer one.
type killJournal struct {
	path string
	mu   sync.Mutex
	byID map[string]nodeapi.Event
}

// loadKillJournal reads dataDir's kills.json (none: an empty journal).
func loadKillJournal(dataDir string) (*killJournal, error) {
	j := &killJournal{path: filepath.Join(dataDir, killsFile), byID: map[string]nodeapi.Event{}}
	b, err := os.ReadFile(j.path)
	if errors.Is(err, os.ErrNotExist) {
		return j, nil
	}
	if err != nil {
		return nil, fmt.Errorf("node kills: %w", err)
	}
	var rec killsRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("node kills %s: %w", j.path, err)
	}
	if rec.Version > killsVersion {
		return nil, fmt.Errorf("node kills %s: version %d is newer than this agent's %d: %w", j.path, rec.Version, killsVersion, errNewerRecord)
	}
	for _, k := range rec.Kills {
		if sandbox.ValidID(k.SandboxID) {
			j.byID[k.SandboxID] = nodeapi.Event{Type: k.Type, SandboxID: k.SandboxID, ExecutionID: k.ExecutionID, Reason: k.Reason, At: k.At}
		}
	}
	return j, nil
}

// listLocked returns the kills oldest first. j.mu is held.
func (j *killJournal) listLocked() []nodeapi.Event {
	out := make([]nodeapi.Event, 0, len(j.byID))
	for _, ev := range j.byID {
		out = append(out, ev)
	}
	slices.SortFunc(out, func(a, b nodeapi.Event) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return cmp.Compare(a.SandboxID, b.SandboxID)
	})
	return out
}

// saveLocked writes the journal. j.mu is held.
func (j *killJournal) saveLocked() error {
	list := j.listLocked()
	rec := killsRecord{Version: killsVersion, Kills: make([]killEntry, 0, len(list))}
	for _, ev := range list {
		rec.Kills = append(rec.Kills, killEntry{Type: ev.Type, SandboxID: ev.SandboxID, ExecutionID: ev.ExecutionID, Reason: ev.Reason, At: ev.At.UTC()})
	}
	b, err := json.Marshal(&rec)
	if err != nil {
		return err
	}
	return atomicfile.Write(j.path, b, 0o600)
}

// add keeps ev (replacing an earlier kill of the same sandbox) and writes
// the journal; the oldest kills go past maxKeptKills. It returns how many
// were dropped.
func (j *killJournal) add(ev nodeapi.Event) (dropped int, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.byID[ev.SandboxID] = ev
	if over := len(j.byID) - maxKeptKills; over > 0 {
		for _, old := range j.listLocked()[:over] {
			delete(j.byID, old.SandboxID)
		}
		dropped = over
	}
	return dropped, j.saveLocked()
}

func (j *killJournal) get(id string) (nodeapi.Event, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	ev, ok := j.byID[id]
	return ev, ok
}

func (j *killJournal) list() []nodeapi.Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.listLocked()
}

// ack forgets the kills acks name, with their execution.
func (j *killJournal) ack(acks []nodeapi.KillAck) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	changed := false
	for _, k := range acks {
		if ev, ok := j.byID[k.SandboxID]; ok && ev.ExecutionID == k.ExecutionID {
			delete(j.byID, k.SandboxID)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return j.saveLocked()
}

var _ nodeapi.KillReporter = (*Agent)(nil)

// OwnKills implements nodeapi.KillReporter.
func (a *Agent) OwnKills(context.Context) ([]nodeapi.Event, error) {
	return a.kills.list(), nil
}

// AckKills implements nodeapi.KillReporter.
func (a *Agent) AckKills(_ context.Context, acks []nodeapi.KillAck) error {
	if err := a.kills.ack(acks); err != nil {
		return fmt.Errorf("node kills: %w", err)
	}
	return nil
}

// journalKill records the agent's own kill ev of a sandbox before its
// host objects go; a write that fails is logged (the kill is still
// reported while the agent runs).
func (a *Agent) journalKill(ev nodeapi.Event, log *slog.Logger) {
	dropped, err := a.kills.add(ev)
	if err != nil {
		log.Warn("record the node's own kill; it is reported until the agent stops", "error", err)
	}
	if dropped > 0 {
		log.Warn("kills no control plane acknowledged: the oldest are forgotten", "dropped", dropped, "kept", maxKeptKills)
	}
}

// goneErr is the error about sandbox id, which the agent does not hold
// (any more): a nodeapi.KilledError when the agent killed it on its own
// and the control plane has not acknowledged that, else ErrNotFound.
func (a *Agent) goneErr(id string) error {
	if ev, ok := a.kills.get(id); ok {
		return &nodeapi.KilledError{Kill: ev}
	}
	return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
}

// newKilledCounter is sandbox_killed_total{kill_reason} of the node.
func newKilledCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandbox_killed_total",
		Help: "Sandboxes this node killed or saw end, by kill reason: the control plane's requests and the node's own kills (backstop, exit, limits).",
	}, []string{"kill_reason"})
}

// countKill counts one kill the agent carried out.
func (a *Agent) countKill(reason sandbox.KillReason) {
	a.killed.WithLabelValues(reason.String()).Inc()
}
