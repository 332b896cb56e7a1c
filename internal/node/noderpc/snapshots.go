package noderpc

import (
	"context"
	"time"

	"connectrpc.com/connect"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// Sandbox snapshots (nodeapi.SandboxSnapshotter) and sandbox logs
// (nodeapi.LogSource) on the wire: the requests name a sandbox and build
// IDs, never a path, and the answers carry none.

func (s *server) TakeSandboxSnapshot(ctx context.Context, req *connect.Request[nodepb.TakeSandboxSnapshotRequest]) (*connect.Response[nodepb.TakeSandboxSnapshotResponse], error) {
	if s.snaps == nil {
		return nil, s.fail("TakeSandboxSnapshot", unsupported("sandbox snapshots"))
	}
	m := req.Msg
	snap, err := s.snaps.SnapshotSandbox(ctx, m.GetId(), nodeapi.SnapshotRequest{TeamID: m.GetTeamId(), TemplateID: m.GetTemplateId(), BuildID: m.GetBuildId()})
	if err != nil {
		return nil, s.fail("TakeSandboxSnapshot", err)
	}
	return connect.NewResponse(SandboxSnapshotToProto(snap)), nil
}

func (s *server) DeleteSandboxSnapshot(ctx context.Context, req *connect.Request[nodepb.DeleteSandboxSnapshotRequest]) (*connect.Response[nodepb.DeleteSandboxSnapshotResponse], error) {
	if s.snaps == nil {
		return nil, s.fail("DeleteSandboxSnapshot", unsupported("sandbox snapshots"))
	}
	if err := s.snaps.DeleteSandboxSnapshot(ctx, req.Msg.GetBuildId()); err != nil {
		return nil, s.fail("DeleteSandboxSnapshot", err)
	}
	return connect.NewResponse(&nodepb.DeleteSandboxSnapshotResponse{}), nil
}

func (s *server) SandboxLogs(ctx context.Context, req *connect.Request[nodepb.SandboxLogsRequest]) (*connect.Response[nodepb.SandboxLogsResponse], error) {
	ls, ok := s.svc.(nodeapi.LogSource)
	if !ok {
		return nil, s.fail("SandboxLogs", unsupported("sandbox logs"))
	}
	var start = Time(req.Msg.GetStart())
	entries, err := ls.SandboxLogs(ctx, req.Msg.GetId(), start)
	if err != nil {
		return nil, s.fail("SandboxLogs", err)
	}
	out := &nodepb.SandboxLogsResponse{Entries: make([]*nodepb.LogEntry, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, &nodepb.LogEntry{Timestamp: Timestamp(e.Timestamp), Level: e.Level, Message: e.Message, Fields: e.Fields})
	}
	return connect.NewResponse(out), nil
}

// SandboxSnapshotToProto converts s; its source template goes without a
// path.
func SandboxSnapshotToProto(s *nodeapi.SandboxSnapshot) *nodepb.TakeSandboxSnapshotResponse {
	out := &nodepb.TakeSandboxSnapshotResponse{
		Source: sourceToProto(s.Source),
		Rootfs: &nodepb.Artifact{Sha256: s.RootFS.SHA256, Size: s.RootFS.Size},
	}
	if s.Host != nil {
		h := s.Host
		out.Snapshot = &nodepb.Artifact{Sha256: s.Snapshot.SHA256, Size: s.Snapshot.Size}
		out.Host = &nodepb.SnapshotHost{Runtime: h.Runtime, Envd: h.Envd, CpuFlags: h.CPUFlags, Vcpus: int32(h.VCPUs),
			MemoryMb: h.MemoryMB, TmpMb: h.TmpMB, DiskMb: h.DiskMB}
	}
	return out
}

// SandboxSnapshotFromProto converts p; a path in its source template is
// dropped (the caller resolves builds by ID).
func SandboxSnapshotFromProto(p *nodepb.TakeSandboxSnapshotResponse) *nodeapi.SandboxSnapshot {
	out := &nodeapi.SandboxSnapshot{
		Source: sourceFromProto(p.GetSource()),
		RootFS: nodeapi.Artifact{SHA256: p.GetRootfs().GetSha256(), Size: p.GetRootfs().GetSize()},
	}
	if h := p.GetHost(); h != nil {
		out.Snapshot = nodeapi.Artifact{SHA256: p.GetSnapshot().GetSha256(), Size: p.GetSnapshot().GetSize()}
		out.Host = &nodeapi.SnapshotHost{Runtime: h.GetRuntime(), Envd: h.GetEnvd(), CPUFlags: h.GetCpuFlags(), VCPUs: int(h.GetVcpus()),
			MemoryMB: h.GetMemoryMb(), TmpMB: h.GetTmpMb(), DiskMB: h.GetDiskMb()}
	}
	return out
}

// LogEntriesFromProto converts es.
func LogEntriesFromProto(es []*nodepb.LogEntry) []nodeapi.LogEntry {
	out := make([]nodeapi.LogEntry, 0, len(es))
	for _, e := range es {
		fields := e.GetFields()
		if fields == nil {
			fields = map[string]string{}
		}
		out = append(out, nodeapi.LogEntry{Timestamp: Time(e.GetTimestamp()), Level: e.GetLevel(), Message: e.GetMessage(), Fields: fields})
	}
	return out
}

// sourceToProto converts a sandbox snapshot's source template: what a
// sandbox of it is started with, never its paths on the node (rootfs and
// snapshot_dir stay empty).
func sourceToProto(t nodeapi.Template) *nodepb.Template {
	return &nodepb.Template{
		Id: t.ID, BuildId: t.BuildID, Env: t.Env, User: t.User, Workdir: t.Workdir, StartCmd: t.StartCmd,
		Resources: ResourcesToProto(t.Resources),
	}
}

// sourceFromProto converts a sandbox snapshot's source template; paths it
// may carry are dropped (the caller resolves builds by ID).
func sourceFromProto(p *nodepb.Template) nodeapi.Template {
	return nodeapi.Template{
		ID: p.GetId(), BuildID: p.GetBuildId(), Env: p.GetEnv(), User: p.GetUser(), Workdir: p.GetWorkdir(), StartCmd: p.GetStartCmd(),
		Resources: ResourcesFromProto(p.GetResources()),
	}
}

func (s *server) EgressLog(ctx context.Context, req *connect.Request[nodepb.EgressLogRequest]) (*connect.Response[nodepb.EgressLogResponse], error) {
	el, ok := s.svc.(nodeapi.EgressLogger)
	if !ok {
		return nil, s.fail("EgressLog", unsupported("egress logs"))
	}
	entries, err := el.EgressLog(ctx, req.Msg.GetId())
	if err != nil {
		return nil, s.fail("EgressLog", err)
	}
	out := &nodepb.EgressLogResponse{Entries: make([]*nodepb.EgressEntry, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, &nodepb.EgressEntry{Time: Timestamp(e.Time), Proto: e.Proto, Host: e.Host, Addr: e.Addr,
			Port: int32(e.Port), Allowed: e.Allowed, Reason: e.Reason, BytesOut: e.BytesOut, BytesIn: e.BytesIn,
			DurationNs: int64(e.Duration), Open: e.Open})
	}
	return connect.NewResponse(out), nil
}

// EgressEntriesFromProto converts an egress log.
func EgressEntriesFromProto(es []*nodepb.EgressEntry) []nodeapi.EgressEntry {
	out := make([]nodeapi.EgressEntry, 0, len(es))
	for _, e := range es {
		out = append(out, nodeapi.EgressEntry{Time: Time(e.GetTime()), Proto: e.GetProto(), Host: e.GetHost(), Addr: e.GetAddr(),
			Port: int(e.GetPort()), Allowed: e.GetAllowed(), Reason: e.GetReason(), BytesOut: e.GetBytesOut(), BytesIn: e.GetBytesIn(),
			Duration: time.Duration(e.GetDurationNs()), Open: e.GetOpen()})
	}
	return out
}
