package nodebuild

import (
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	nodepb "github.com/warren-sandbox/warren/api/node"
	"github.com/warren-sandbox/warren/internal/awsauth"
	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/templates"
)

// What crosses between the control plane and its nodes of a template, a
// build and what to build: the build wire's messages (api/node/build.proto:
// CatalogTemplate, CatalogBuild, BuildSpec), made from the storage
// records (templates.Template, templates.Build, builder.Spec) and back.
// No message has a field that names a path on either side (a build's
// root filesystem, its tar, its snapshot directory), nor the control
// plane's bookkeeping (the node a build runs on, aliases): each side
// makes its own record from them, its paths its own (docs/security.md,
// "Nothing that names a host path crosses a wire").

// TemplateToProto is t on the wire.
func TemplateToProto(t *templates.Template) *nodepb.CatalogTemplate {
	p := &nodepb.CatalogTemplate{Id: t.ID, TeamId: t.TeamID, Public: t.Public, CpuCount: int32(t.CPUCount), MemoryMb: t.MemoryMB, DiskMb: t.DiskMB}
	if len(t.Tags) > 0 {
		p.Tags = map[string]*nodepb.CatalogTag{}
		for name, tg := range t.Tags {
			p.Tags[name] = &nodepb.CatalogTag{BuildId: tg.BuildID, CreatedAt: timestamp(tg.CreatedAt)}
		}
	}
	return p
}

// TemplateRecord is p as a catalog's record (no aliases: a node resolves
// builds by ID).
func TemplateRecord(p *nodepb.CatalogTemplate) *templates.Template {
	t := &templates.Template{ID: p.GetId(), TeamID: p.GetTeamId(), Public: p.GetPublic(), CPUCount: int(p.GetCpuCount()),
		MemoryMB: p.GetMemoryMb(), DiskMB: p.GetDiskMb()}
	if len(p.GetTags()) > 0 {
		t.Tags = map[string]templates.Tag{}
		for name, tg := range p.GetTags() {
			t.Tags[name] = templates.Tag{BuildID: tg.GetBuildId(), CreatedAt: timeOf(tg.GetCreatedAt())}
		}
	}
	return t
}

// BuildToProto is b on the wire.
func BuildToProto(b *templates.Build) *nodepb.CatalogBuild {
	p := &nodepb.CatalogBuild{
		Id: b.ID, TemplateId: b.TemplateID, Status: string(b.Status), Tags: slices.Clone(b.Tags), Env: maps.Clone(b.Env),
		User: b.User, Workdir: b.Workdir, StartCmd: b.StartCmd, ReadyCmd: b.ReadyCmd,
		CpuCount: int32(b.CPUCount), MemoryMb: b.MemoryMB, DiskMb: b.DiskMB,
		SnapshotHost: snapshotHostToProto(b.SnapshotHost), EnvdVersion: b.EnvdVersion, DiskBytes: b.DiskBytes,
		CreatedAt: timestamp(b.CreatedAt), FinishedAt: timestamp(b.FinishedAt),
	}
	if b.RootFSSHA256 != "" || b.RootFSSize != 0 {
		p.Rootfs = &nodepb.Artifact{Sha256: b.RootFSSHA256, Size: b.RootFSSize}
	}
	if b.SnapshotSHA256 != "" || b.SnapshotSize != 0 {
		p.Snapshot = &nodepb.Artifact{Sha256: b.SnapshotSHA256, Size: b.SnapshotSize}
	}
	if o := b.SandboxSnapshot; o != nil {
		p.SandboxSnapshot = &nodepb.SandboxSnapshotOrigin{SandboxId: o.SandboxID, TeamId: o.TeamID, CreatedAt: timestamp(o.CreatedAt),
			VolumePaths: slices.Clone(o.VolumePaths)}
	}
	if r := b.Reason; r != nil {
		p.Reason = &nodepb.BuildReason{Message: r.Message, Step: r.Step}
	}
	return p
}

// BuildRecord is p as a catalog's record, with no path: the side that
// keeps it sets its own.
func BuildRecord(p *nodepb.CatalogBuild) *templates.Build {
	b := &templates.Build{
		ID: p.GetId(), TemplateID: p.GetTemplateId(), Status: templates.BuildStatus(p.GetStatus()), Tags: slices.Clone(p.GetTags()),
		Env: maps.Clone(p.GetEnv()), User: p.GetUser(), Workdir: p.GetWorkdir(), StartCmd: p.GetStartCmd(), ReadyCmd: p.GetReadyCmd(),
		CPUCount: int(p.GetCpuCount()), MemoryMB: p.GetMemoryMb(), DiskMB: p.GetDiskMb(),
		RootFSSHA256: p.GetRootfs().GetSha256(), RootFSSize: p.GetRootfs().GetSize(),
		SnapshotSHA256: p.GetSnapshot().GetSha256(), SnapshotSize: p.GetSnapshot().GetSize(),
		SnapshotHost: snapshotHostOf(p.GetSnapshotHost()), EnvdVersion: p.GetEnvdVersion(), DiskBytes: p.GetDiskBytes(),
		CreatedAt: timeOf(p.GetCreatedAt()), FinishedAt: timeOf(p.GetFinishedAt()),
	}
	if o := p.GetSandboxSnapshot(); o != nil {
		b.SandboxSnapshot = &templates.SandboxSnapshotOrigin{SandboxID: o.GetSandboxId(), TeamID: o.GetTeamId(), CreatedAt: timeOf(o.GetCreatedAt()),
			VolumePaths: slices.Clone(o.GetVolumePaths())}
	}
	if r := p.GetReason(); r != nil {
		b.Reason = &templates.Reason{Message: r.GetMessage(), Step: r.GetStep()}
	}
	return b
}

func snapshotHostToProto(h *nodeapi.SnapshotHost) *nodepb.SnapshotHost {
	if h == nil {
		return nil
	}
	return &nodepb.SnapshotHost{Runtime: h.Runtime, Envd: h.Envd, CpuFlags: slices.Clone(h.CPUFlags), Vcpus: int32(h.VCPUs),
		MemoryMb: h.MemoryMB, TmpMb: h.TmpMB, DiskMb: h.DiskMB}
}

func snapshotHostOf(p *nodepb.SnapshotHost) *nodeapi.SnapshotHost {
	if p == nil {
		return nil
	}
	return &nodeapi.SnapshotHost{Runtime: p.GetRuntime(), Envd: p.GetEnvd(), CPUFlags: slices.Clone(p.GetCpuFlags()), VCPUs: int(p.GetVcpus()),
		MemoryMB: p.GetMemoryMb(), TmpMB: p.GetTmpMb(), DiskMB: p.GetDiskMb()}
}

// SpecToProto is s on the wire, without its registry credentials
// (AuthToProto: they travel apart).
func SpecToProto(s builder.Spec) *nodepb.BuildSpec {
	p := &nodepb.BuildSpec{FromImage: s.FromImage, FromTemplate: s.FromTemplate, StartCmd: s.StartCmd, ReadyCmd: s.ReadyCmd, Force: s.Force,
		Team: &nodepb.TeamBuildLimits{Builds: int32(s.Team.Builds), StorageMb: s.Team.StorageMB}}
	for _, st := range s.Steps {
		p.Steps = append(p.Steps, &nodepb.BuildStep{Type: st.Type, Args: slices.Clone(st.Args), Force: st.Force, FilesHash: st.FilesHash, Expand: st.Expand})
	}
	return p
}

// SpecOf is p as the builder takes it (no registry credentials:
// AuthOf).
func SpecOf(p *nodepb.BuildSpec) builder.Spec {
	s := builder.Spec{FromImage: p.GetFromImage(), FromTemplate: p.GetFromTemplate(), StartCmd: p.GetStartCmd(), ReadyCmd: p.GetReadyCmd(),
		Force: p.GetForce(), Team: builder.TeamLimits{Builds: int(p.GetTeam().GetBuilds()), StorageMB: p.GetTeam().GetStorageMb()}}
	for _, st := range p.GetSteps() {
		s.Steps = append(s.Steps, builder.Step{Type: st.GetType(), Args: slices.Clone(st.GetArgs()), Force: st.GetForce(), FilesHash: st.GetFilesHash(),
			Expand: st.GetExpand()})
	}
	return s
}

// AuthToProto is a on the wire (nil for none).
func AuthToProto(a *builder.RegistryAuth) *nodepb.RegistryAuth {
	if a == nil {
		return nil
	}
	p := &nodepb.RegistryAuth{Username: a.Username, Password: a.Password}
	if a.ECR != nil {
		c := a.ECR.Credentials
		p.Ecr = &nodepb.ECRAuth{AccessKeyId: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken, Region: a.ECR.Region}
	}
	return p
}

// AuthOf is p as the builder takes it (nil for none).
func AuthOf(p *nodepb.RegistryAuth) *builder.RegistryAuth {
	if p == nil {
		return nil
	}
	a := &builder.RegistryAuth{Username: p.GetUsername(), Password: p.GetPassword()}
	if e := p.GetEcr(); e != nil {
		a.ECR = &awsauth.ECR{Credentials: awsauth.Credentials{AccessKeyID: e.GetAccessKeyId(), SecretAccessKey: e.GetSecretAccessKey(),
			SessionToken: e.GetSessionToken()}, Region: e.GetRegion()}
	}
	return a
}

// SourceOf is the control plane's answer for build b of template t, held
// by holders (a node's NodeConfig.Locate gets it).
func SourceOf(t *templates.Template, b *templates.Build, holders ...*nodepb.BuildHolder) *nodepb.BuildSource {
	return &nodepb.BuildSource{Template: TemplateToProto(t), Build: BuildToProto(b), Holders: slices.Clone(holders)}
}

func logsToProto(logs []templates.LogEntry) []*nodepb.BuildLogEntry {
	out := make([]*nodepb.BuildLogEntry, 0, len(logs))
	for _, e := range logs {
		out = append(out, &nodepb.BuildLogEntry{Timestamp: timestamp(e.Timestamp), Level: string(e.Level), Message: e.Message, Step: e.Step})
	}
	return out
}

func logsOf(p []*nodepb.BuildLogEntry) []templates.LogEntry {
	out := make([]templates.LogEntry, 0, len(p))
	for _, e := range p {
		out = append(out, templates.LogEntry{Timestamp: timeOf(e.GetTimestamp()), Level: templates.LogLevel(e.GetLevel()), Message: e.GetMessage(), Step: e.GetStep()})
	}
	return out
}

// timestamp converts t; the zero time is nil.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// timeOf converts ts; nil is the zero time.
func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}
