package nodereg

import (
	"context"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
	"github.com/warren-sandbox/warren/internal/store"
)

// The node's own kills travel in its heartbeat (nodeapi.KillReporter): a
// node reports every kill it made without being asked (backstop, exit,
// limits) in Status.Kills, oldest first, until a reply acknowledges it in
// Reply.AckedKills; the replica that hears the heartbeat records each one
// as the node made it (the lifecycle's RecordNodeKill: for a sandbox
// placed on that node, in the execution named, at the time of the kill).
// So a kill made while the control plane was away reaches the event log
// with its reason as soon as a replica hears the node again, whichever
// replica that is.

// MaxReportedKills is the most kills one heartbeat carries (Collect sends
// the oldest; the rest follow in the next heartbeats); a status with more
// is invalid.
const MaxReportedKills = 256

// Kill is one kill a node made on its own, as its heartbeat reports it.
type Kill struct {
	SandboxID   string `json:"sandboxID"`
	ExecutionID string `json:"executionID"`
	// Type is exited (the sandbox's init ended, or a limit ended it) or
	// killed (the node stopped it: its TTL backstop).
	Type   string    `json:"type"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// KillAck names a reported kill the control plane has recorded (or will
// never record: not the reporting node's, or stale): the node forgets it.
type KillAck struct {
	SandboxID   string `json:"sandboxID"`
	ExecutionID string `json:"executionID"`
}

// NodeKillRecorder records a node's own kill (lifecycle.Manager): nil
// when recorded, or when it never will be; an error when it could not be
// now.
type NodeKillRecorder interface {
	RecordNodeKill(ctx context.Context, nodeID string, ev nodeapi.Event) error
}

func validKills(nodeID string, kills []Kill) error {
	if len(kills) > MaxReportedKills {
		return errdefs.Publicf(errdefs.ErrInvalid, "node %q: %d kills in one heartbeat, at most %d", nodeID, len(kills), MaxReportedKills)
	}
	for _, k := range kills {
		if len(k.SandboxID) > 128 || len(k.ExecutionID) > 128 || len(k.Type) > 32 || len(k.Reason) > 64 {
			return errdefs.Publicf(errdefs.ErrInvalid, "node %q: a reported kill has a field too long", nodeID)
		}
	}
	return nil
}

// RecordKills records the kills node nodeID reported and returns the ones
// to acknowledge: every kill recorded, and every one that never will be
// (the recorder dropped it). A kill the store could not take now is not
// acknowledged: the node reports it again. The reservation of a sandbox
// placed on the node that it killed is given back.
func (r *Registry) RecordKills(ctx context.Context, nodeID string, kills []Kill) []KillAck {
	rec, ok := r.killer.(NodeKillRecorder)
	if !ok || len(kills) == 0 {
		return nil
	}
	var acks []KillAck
	for _, k := range kills {
		ev := nodeapi.Event{Type: nodeapi.EventType(k.Type), SandboxID: k.SandboxID, ExecutionID: k.ExecutionID,
			Reason: sandbox.KillReason(k.Reason), At: k.At}
		if err := rec.RecordNodeKill(ctx, nodeID, ev); err != nil {
			r.log.Warn("record a node's own kill; it will report it again", "node_id", nodeID, "sandbox_id", k.SandboxID, "error", err)
			continue
		}
		acks = append(acks, KillAck{SandboxID: k.SandboxID, ExecutionID: k.ExecutionID})
		if sb, err := r.st.GetSandbox(ctx, k.SandboxID); err == nil && sb.State == sandbox.StateKilled && sb.Spec.NodeID == nodeID {
			if _, err := r.nodes.ReleaseReservation(ctx, k.SandboxID); err != nil {
				r.log.Warn("release the reservation of a sandbox its node killed", "node_id", nodeID, "sandbox_id", k.SandboxID, "error", err)
			}
		}
	}
	return acks
}

// Beat records one heartbeat (Record) with the kills it reports
// (RecordKills) and returns the reply to it.
func (r *Registry) Beat(ctx context.Context, st Status) (*Reply, error) {
	status, err := r.Record(ctx, st)
	if err != nil {
		return nil, err
	}
	return &Reply{Status: status, AckedKills: r.RecordKills(ctx, st.ID, st.Kills)}, nil
}

// ownKills returns the oldest MaxReportedKills kills svc reports, when it
// is a nodeapi.KillReporter.
func ownKills(ctx context.Context, svc nodeapi.Service) ([]Kill, error) {
	kr, ok := svc.(nodeapi.KillReporter)
	if !ok {
		return nil, nil
	}
	evs, err := kr.OwnKills(ctx)
	if err != nil {
		return nil, err
	}
	var out []Kill
	for _, ev := range evs[:min(len(evs), MaxReportedKills)] {
		out = append(out, Kill{SandboxID: ev.SandboxID, ExecutionID: ev.ExecutionID, Type: string(ev.Type), Reason: string(ev.Reason), At: ev.At.UTC()})
	}
	return out, nil
}

// Apply hands the API's reply to a heartbeat to the node's Service: the
// kills it acknowledged are forgotten (nodeapi.KillReporter), and the
// node's admin status reaches a nodeapi.Drainer. A node's heartbeat loop
// calls it with every reply (Client.Run's onReply).
func Apply(ctx context.Context, svc nodeapi.Service, r *Reply) error {
	if r == nil {
		return nil
	}
	if d, ok := svc.(nodeapi.Drainer); ok {
		d.SetDraining(r.Status == store.NodeDraining)
	}
	kr, ok := svc.(nodeapi.KillReporter)
	if !ok || len(r.AckedKills) == 0 {
		return nil
	}
	acks := make([]nodeapi.KillAck, 0, len(r.AckedKills))
	for _, a := range r.AckedKills {
		acks = append(acks, nodeapi.KillAck{SandboxID: a.SandboxID, ExecutionID: a.ExecutionID})
	}
	return kr.AckKills(ctx, acks)
}
