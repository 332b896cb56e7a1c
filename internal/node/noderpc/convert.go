// Package noderpc serves a nodeapi.Service over Connect RPC (the NodeService of
// api/node/node.proto) and holds the translations between the Go types of
// package node and their protobuf messages, shared with nodeclient.
//
// Errors cross the wire as Connect codes mapped from Warren's error classes
// (errdefs) and come back as the same classes.
package noderpc

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/egressrules"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/errdefs/errconnect"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/sandbox"
)

// Timestamp converts t; the zero time is nil.
func Timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// Time converts ts; nil is the zero time.
func Time(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// ResourcesToProto converts r.
func ResourcesToProto(r sandbox.Resources) *nodepb.Resources {
	return &nodepb.Resources{Vcpus: int32(r.VCPUs), MemoryMb: r.MemoryMB, DiskMb: r.DiskMB, Pids: r.Pids}
}

// ResourcesFromProto converts r.
func ResourcesFromProto(r *nodepb.Resources) sandbox.Resources {
	return sandbox.Resources{VCPUs: int(r.GetVcpus()), MemoryMB: r.GetMemoryMb(), DiskMB: r.GetDiskMb(), Pids: r.GetPids()}
}

// PolicyToProto converts p; its node-local redirect does not cross.
func PolicyToProto(p sandbox.NetworkPolicy) *nodepb.Policy {
	out := &nodepb.Policy{Internet: p.Internet}
	for _, c := range p.AllowOut {
		out.AllowOut = append(out.AllowOut, c.String())
	}
	for _, c := range p.DenyOut {
		out.DenyOut = append(out.DenyOut, c.String())
	}
	if e := p.Egress; e != nil {
		out.Egress = &nodepb.EgressRules{Hosts: e.Hosts}
		for _, t := range e.Transforms {
			out.Egress.Transforms = append(out.Egress.Transforms, &nodepb.HeaderTransform{Host: t.Host, Headers: t.Headers})
		}
		if px := e.Proxy; px != nil {
			out.Egress.Proxy = &nodepb.SocksProxy{Address: px.Address, Username: px.Username, Password: px.Password}
		}
	}
	return out
}

// PolicyFromProto converts p; a malformed CIDR is ErrInvalid.
func PolicyFromProto(p *nodepb.Policy) (sandbox.NetworkPolicy, error) {
	out := sandbox.NetworkPolicy{Internet: p.GetInternet()}
	for _, s := range p.GetAllowOut() {
		c, err := netip.ParsePrefix(s)
		if err != nil {
			return out, fmt.Errorf("allowOut %q: %w", s, errdefs.ErrInvalid)
		}
		out.AllowOut = append(out.AllowOut, c)
	}
	for _, s := range p.GetDenyOut() {
		c, err := netip.ParsePrefix(s)
		if err != nil {
			return out, fmt.Errorf("denyOut %q: %w", s, errdefs.ErrInvalid)
		}
		out.DenyOut = append(out.DenyOut, c)
	}
	if e := p.GetEgress(); e != nil {
		out.Egress = &egressrules.Rules{Hosts: e.GetHosts()}
		for _, t := range e.GetTransforms() {
			out.Egress.Transforms = append(out.Egress.Transforms, egressrules.Transform{Host: t.GetHost(), Headers: t.GetHeaders()})
		}
		if px := e.GetProxy(); px != nil {
			out.Egress.Proxy = &egressrules.Proxy{Address: px.GetAddress(), Username: px.GetUsername(), Password: px.GetPassword()}
		}
	}
	return out, nil
}

// TemplateToProto names t on the wire: its ID and build ID. Nothing else
// of it crosses (its files are the node's, which resolves the build
// itself: noderpc.Options.ResolveTemplate).
func TemplateToProto(t nodeapi.Template) *nodepb.Template {
	return &nodepb.Template{Id: t.ID, BuildId: t.BuildID}
}

// CreateToProto converts r.
func CreateToProto(r nodeapi.CreateRequest) *nodepb.CreateRequest {
	return &nodepb.CreateRequest{
		Id: r.ID, ExecutionId: r.ExecutionID, TeamId: r.TeamID, Template: TemplateToProto(r.Template),
		Resources: ResourcesToProto(r.Resources), EndAt: Timestamp(r.EndAt), Network: PolicyToProto(r.Network),
		EnvVars: r.EnvVars, EnvdAccessToken: r.EnvdAccessToken, Metadata: r.Metadata, TimeoutMs: r.Timeout.Milliseconds(),
		Volumes: VolumeMountsToProto(r.Volumes),
	}
}

// CreateFromProto converts r; its template is named only (the server
// resolves it).
func CreateFromProto(r *nodepb.CreateRequest) (nodeapi.CreateRequest, error) {
	pol, err := PolicyFromProto(r.GetNetwork())
	if err != nil {
		return nodeapi.CreateRequest{}, err
	}
	return nodeapi.CreateRequest{
		ID: r.GetId(), ExecutionID: r.GetExecutionId(), TeamID: r.GetTeamId(),
		Template:  nodeapi.Template{ID: r.GetTemplate().GetId(), BuildID: r.GetTemplate().GetBuildId()},
		Resources: ResourcesFromProto(r.GetResources()), EndAt: Time(r.GetEndAt()), Network: pol,
		EnvVars: r.GetEnvVars(), EnvdAccessToken: r.GetEnvdAccessToken(), Metadata: r.GetMetadata(),
		Timeout: time.Duration(max(r.GetTimeoutMs(), 0)) * time.Millisecond,
		Volumes: VolumeMountsFromProto(r.GetVolumes()),
	}, nil
}

// SandboxToProto converts s.
func SandboxToProto(s *nodeapi.Sandbox) *nodepb.Sandbox {
	if s == nil {
		return nil
	}
	return &nodepb.Sandbox{
		Id: s.ID, ExecutionId: s.ExecutionID, TemplateId: s.TemplateID, BuildId: s.BuildID, TeamId: s.TeamID,
		State: string(s.State), Epoch: s.Epoch, StartedAt: Timestamp(s.StartedAt), EndAt: Timestamp(s.EndAt),
		Resources: ResourcesToProto(s.Resources), Network: PolicyToProto(s.Network), Address: s.Address, Host: s.Host,
		EnvdVersion: s.EnvdVersion, Metadata: s.Metadata, PausedWithMemory: s.PausedWithMemory,
		Health: string(s.Health), NodeProxy: s.NodeProxy,
	}
}

// SandboxFromProto converts s.
func SandboxFromProto(s *nodepb.Sandbox) (*nodeapi.Sandbox, error) {
	if s == nil {
		return nil, fmt.Errorf("node answered without a sandbox: %w", errdefs.ErrUnavailable)
	}
	pol, err := PolicyFromProto(s.GetNetwork())
	if err != nil {
		return nil, err
	}
	st := sandbox.State(s.GetState())
	if !st.Valid() {
		return nil, fmt.Errorf("sandbox %q: state %q: %w", s.GetId(), s.GetState(), errdefs.ErrInvalid)
	}
	return &nodeapi.Sandbox{
		ID: s.GetId(), ExecutionID: s.GetExecutionId(), TemplateID: s.GetTemplateId(), BuildID: s.GetBuildId(), TeamID: s.GetTeamId(),
		State: st, Epoch: s.GetEpoch(), StartedAt: Time(s.GetStartedAt()), EndAt: Time(s.GetEndAt()),
		Resources: ResourcesFromProto(s.GetResources()), Network: pol, Address: s.GetAddress(), Host: s.GetHost(),
		EnvdVersion: s.GetEnvdVersion(), Metadata: s.GetMetadata(), PausedWithMemory: s.GetPausedWithMemory(),
		Health: healthFromProto(s.GetHealth()), NodeProxy: s.GetNodeProxy(),
	}, nil
}

// PoolStatusToProto converts p.
func PoolStatusToProto(p nodeapi.PoolStatus) *nodepb.PoolStatus {
	return &nodepb.PoolStatus{BuildId: p.BuildID, Size: int32(p.Size), Ready: int32(p.Ready), Making: int32(p.Making), Hits: p.Hits, Misses: p.Misses}
}

// PoolStatusFromProto converts p.
func PoolStatusFromProto(p *nodepb.PoolStatus) nodeapi.PoolStatus {
	return nodeapi.PoolStatus{BuildID: p.GetBuildId(), Size: int(p.GetSize()), Ready: int(p.GetReady()), Making: int(p.GetMaking()), Hits: p.GetHits(), Misses: p.GetMisses()}
}

// TemplateUseToProto converts u without its paths on the node.
func TemplateUseToProto(u nodeapi.TemplateUse) *nodepb.TemplateUse {
	return &nodepb.TemplateUse{TemplateId: u.TemplateID, BuildId: u.BuildID, SandboxId: u.SandboxID}
}

// TemplateUseFromProto converts u (no paths: RootFS and SnapshotDir stay
// empty).
func TemplateUseFromProto(u *nodepb.TemplateUse) nodeapi.TemplateUse {
	return nodeapi.TemplateUse{TemplateID: u.GetTemplateId(), BuildID: u.GetBuildId(), SandboxID: u.GetSandboxId()}
}

// StatsToProto converts s.
func StatsToProto(s *nodeapi.Stats) *nodepb.StatsResponse {
	return &nodepb.StatsResponse{
		At: Timestamp(s.At), CpuCount: int32(s.CPUCount), CpuUsedPct: s.CPUUsedPct,
		MemoryUsedBytes: s.MemoryUsedBytes, MemoryTotal: s.MemoryTotal, MemoryPeakBytes: s.MemoryPeakBytes,
		DiskUsedBytes: s.DiskUsedBytes, DiskTotalBytes: s.DiskTotalBytes,
	}
}

// StatsFromProto converts s.
func StatsFromProto(s *nodepb.StatsResponse) *nodeapi.Stats {
	return &nodeapi.Stats{
		At: Time(s.GetAt()), CPUCount: int(s.GetCpuCount()), CPUUsedPct: s.GetCpuUsedPct(),
		MemoryUsedBytes: s.GetMemoryUsedBytes(), MemoryTotal: s.GetMemoryTotal(), MemoryPeakBytes: s.GetMemoryPeakBytes(),
		DiskUsedBytes: s.GetDiskUsedBytes(), DiskTotalBytes: s.GetDiskTotalBytes(),
	}
}

// EventToProto converts e.
func EventToProto(e nodeapi.Event) *nodepb.Event {
	return &nodepb.Event{Type: string(e.Type), SandboxId: e.SandboxID, ExecutionId: e.ExecutionID, Reason: string(e.Reason), At: Timestamp(e.At)}
}

// EventFromProto converts e.
func EventFromProto(e *nodepb.Event) nodeapi.Event {
	return nodeapi.Event{
		Type: nodeapi.EventType(e.GetType()), SandboxID: e.GetSandboxId(), ExecutionID: e.GetExecutionId(),
		Reason: sandbox.KillReason(e.GetReason()), At: Time(e.GetAt()),
	}
}

// ToConnectError maps err's class to a Connect code (package errconnect),
// keeping its text for the control plane's log. The message a client may
// be told (errdefs.Message), when err carries one, goes as a
// PublicMessage detail: nothing a client sees is made from the text. A
// nodeapi.KilledError (the node killed the sandbox on its own) carries
// its kill as an Event detail.
func ToConnectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	ce = connect.NewError(errconnect.Code(err), err)
	AddPublicDetail(ce, err)
	if kill, ok := nodeapi.NodeKill(err); ok {
		if d, derr := connect.NewErrorDetail(EventToProto(kill)); derr == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}

// FromConnectError maps a Connect error back to Warren's error class; the
// text is the server's, and a PublicMessage detail is the message a
// client may be told. Transport failures are ErrUnavailable.
func FromConnectError(err error) error {
	if err == nil {
		return nil
	}
	code := connect.CodeOf(err)
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	if class := errconnect.Class(code); class != nil {
		if kill, ok := killDetail(ce); ok && errors.Is(class, errdefs.ErrNotFound) {
			return &nodeapi.KilledError{Kill: kill}
		}
		out := error(&classError{msg: msg, class: class})
		if pm := PublicDetail(ce); pm != "" {
			out = errdefs.WithMessage(out, pm)
		}
		return out
	}
	switch code {
	case connect.CodeDeadlineExceeded, connect.CodeCanceled:
		return fmt.Errorf("node: %w", err)
	case connect.CodeUnknown:
		// No Connect error at all: the node could not be reached.
		return &classError{msg: msg, class: errdefs.ErrUnavailable}
	}
	return fmt.Errorf("node: %s", msg)
}

// killDetail returns the node's own kill a not-found error carries.
func killDetail(ce *connect.Error) (nodeapi.Event, bool) {
	if ce == nil {
		return nodeapi.Event{}, false
	}
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			continue
		}
		if ev, ok := v.(*nodepb.Event); ok && ev.GetSandboxId() != "" {
			return EventFromProto(ev), true
		}
	}
	return nodeapi.Event{}, false
}

// classError is an error of a class with the server's message.
type classError struct {
	msg   string
	class error
}

func (e *classError) Error() string { return "node: " + e.msg }
func (e *classError) Unwrap() error { return e.class }

// healthFromProto reads a sandbox's health; empty (an older node) is
// unknown.
func healthFromProto(h string) nodeapi.Health {
	switch nodeapi.Health(h) {
	case nodeapi.HealthHealthy, nodeapi.HealthUnhealthy:
		return nodeapi.Health(h)
	default:
		return nodeapi.HealthUnknown
	}
}

// AddPublicDetail adds to ce, as a PublicMessage detail, the message a
// client may be told of err (errdefs.Message), when err carries one: the
// node wires' way to pass it without making it from the text.
func AddPublicDetail(ce *connect.Error, err error) {
	if msg, ok := errdefs.Message(err); ok {
		if d, derr := connect.NewErrorDetail(&nodepb.PublicMessage{Message: msg}); derr == nil {
			ce.AddDetail(d)
		}
	}
}

// PublicDetail is the PublicMessage detail of ce, "" without one.
func PublicDetail(ce *connect.Error) string {
	if ce == nil {
		return ""
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if pm, ok := v.(*nodepb.PublicMessage); ok {
				return pm.GetMessage()
			}
		}
	}
	return ""
}
