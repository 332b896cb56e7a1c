package nodebuild

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/warren-sandbox/warren/internal/builder"
	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
	"github.com/warren-sandbox/warren/internal/templates"
)

// The wire's own types: what crosses between the control plane and its
// nodes of a template, a build and what to build. They are not the
// storage records (templates.Template, templates.Build, builder.Spec):
// no field names a path on either side (a build's root filesystem, its
// tar, its snapshot directory), nor the control plane's bookkeeping (the
// node a build runs on, aliases). Each side makes its own record from
// them, its paths its own (docs/security.md, "Nothing that names a host
// path crosses a wire"). A body with a field the wire does not know is
// refused (decode), so an old peer's path is an error, not ignored.

// WireTemplate is a template on the wire.
type WireTemplate struct {
	ID     string `json:"id"`
	TeamID string `json:"teamId"`
	Public bool   `json:"public,omitempty"`
	// Tags point names to builds (a node's Sync tells from them whether
	// its copy is superseded).
	Tags     map[string]templates.Tag `json:"tags,omitempty"`
	CPUCount int                      `json:"cpuCount"`
	MemoryMB int64                    `json:"memoryMB"`
	DiskMB   int64                    `json:"diskMB"`
}

// WireBuild is a build on the wire: its state, what a sandbox of it is
// started with, and its artifacts' digests.
type WireBuild struct {
	ID         string                `json:"id"`
	TemplateID string                `json:"templateId"`
	Status     templates.BuildStatus `json:"status"`
	Tags       []string              `json:"tags,omitempty"`
	Env        map[string]string     `json:"env,omitempty"`
	User       string                `json:"user"`
	Workdir    string                `json:"workdir"`
	StartCmd   string                `json:"startCmd,omitempty"`
	ReadyCmd   string                `json:"readyCmd,omitempty"`
	CPUCount   int                   `json:"cpuCount"`
	MemoryMB   int64                 `json:"memoryMB"`
	DiskMB     int64                 `json:"diskMB"`
	// RootFSSHA256 and RootFSSize identify the root filesystem's
	// artifact; SnapshotSHA256, SnapshotSize and SnapshotHost the
	// snapshot on ready's.
	RootFSSHA256   string                `json:"rootfsSha256,omitempty"`
	RootFSSize     int64                 `json:"rootfsSize,omitempty"`
	SnapshotSHA256 string                `json:"snapshotSha256,omitempty"`
	SnapshotSize   int64                 `json:"snapshotSize,omitempty"`
	SnapshotHost   *nodeapi.SnapshotHost `json:"snapshotHost,omitempty"`
	EnvdVersion    string                `json:"envdVersion,omitempty"`
	// DiskBytes is the disk the build took on its node (its team's
	// template storage: builder.CheckStorage).
	DiskBytes int64 `json:"diskBytes,omitempty"`
	// SandboxSnapshot marks a sandbox snapshot's build: a node that pulls
	// it restores it, never starts it cold.
	SandboxSnapshot *templates.SandboxSnapshotOrigin `json:"sandboxSnapshot,omitempty"`
	Reason          *templates.Reason                `json:"reason,omitempty"`
	CreatedAt       time.Time                        `json:"createdAt"`
	FinishedAt      time.Time                        `json:"finishedAt,omitzero"`
}

// WireStep is a build step on the wire (builder.Step).
type WireStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	Force     bool     `json:"force,omitempty"`
	FilesHash string   `json:"filesHash,omitempty"`
	Expand    bool     `json:"expand,omitempty"`
}

// WireSpec is what to build, on the wire (builder.Spec without what is
// the control plane's: the registry credentials travel apart, in
// StartRequest.RegistryAuth; a build context's files are uploaded by
// hash, never named by directory).
type WireSpec struct {
	FromImage    string     `json:"fromImage,omitempty"`
	FromTemplate string     `json:"fromTemplate,omitempty"`
	Steps        []WireStep `json:"steps"`
	StartCmd     string     `json:"startCmd,omitempty"`
	ReadyCmd     string     `json:"readyCmd,omitempty"`
	Force        bool       `json:"force,omitempty"`
	// Team is the build's team's share of the node's build service (its
	// build slots, its template storage), set by the control plane.
	Team builder.TeamLimits `json:"team"`
}

// TemplateOnWire is t on the wire.
func TemplateOnWire(t *templates.Template) WireTemplate {
	return WireTemplate{ID: t.ID, TeamID: t.TeamID, Public: t.Public, Tags: maps.Clone(t.Tags), CPUCount: t.CPUCount, MemoryMB: t.MemoryMB, DiskMB: t.DiskMB}
}

// Record is w as a catalog's record (no aliases: a node resolves builds
// by ID).
func (w WireTemplate) Record() *templates.Template {
	return &templates.Template{ID: w.ID, TeamID: w.TeamID, Public: w.Public, Tags: maps.Clone(w.Tags), CPUCount: w.CPUCount, MemoryMB: w.MemoryMB, DiskMB: w.DiskMB}
}

// BuildOnWire is b on the wire.
func BuildOnWire(b *templates.Build) WireBuild {
	return WireBuild{
		ID: b.ID, TemplateID: b.TemplateID, Status: b.Status, Tags: b.Tags, Env: b.Env, User: b.User, Workdir: b.Workdir,
		StartCmd: b.StartCmd, ReadyCmd: b.ReadyCmd, CPUCount: b.CPUCount, MemoryMB: b.MemoryMB, DiskMB: b.DiskMB,
		RootFSSHA256: b.RootFSSHA256, RootFSSize: b.RootFSSize, SnapshotSHA256: b.SnapshotSHA256, SnapshotSize: b.SnapshotSize,
		SnapshotHost: b.SnapshotHost, EnvdVersion: b.EnvdVersion, DiskBytes: b.DiskBytes, SandboxSnapshot: cloneOrigin(b.SandboxSnapshot),
		Reason: b.Reason, CreatedAt: b.CreatedAt, FinishedAt: b.FinishedAt,
	}
}

func cloneOrigin(o *templates.SandboxSnapshotOrigin) *templates.SandboxSnapshotOrigin {
	if o == nil {
		return nil
	}
	c := *o
	c.VolumePaths = slices.Clone(o.VolumePaths)
	return &c
}

// Record is w as a catalog's record, with no path: the side that keeps
// it sets its own.
func (w WireBuild) Record() *templates.Build {
	return &templates.Build{
		ID: w.ID, TemplateID: w.TemplateID, Status: w.Status, Tags: w.Tags, Env: w.Env, User: w.User, Workdir: w.Workdir,
		StartCmd: w.StartCmd, ReadyCmd: w.ReadyCmd, CPUCount: w.CPUCount, MemoryMB: w.MemoryMB, DiskMB: w.DiskMB,
		RootFSSHA256: w.RootFSSHA256, RootFSSize: w.RootFSSize, SnapshotSHA256: w.SnapshotSHA256, SnapshotSize: w.SnapshotSize,
		SnapshotHost: w.SnapshotHost, EnvdVersion: w.EnvdVersion, DiskBytes: w.DiskBytes, SandboxSnapshot: cloneOrigin(w.SandboxSnapshot),
		Reason: w.Reason, CreatedAt: w.CreatedAt, FinishedAt: w.FinishedAt,
	}
}

// SpecOnWire is s on the wire.
func SpecOnWire(s builder.Spec) WireSpec {
	w := WireSpec{FromImage: s.FromImage, FromTemplate: s.FromTemplate, StartCmd: s.StartCmd, ReadyCmd: s.ReadyCmd, Force: s.Force, Team: s.Team, Steps: []WireStep{}}
	for _, st := range s.Steps {
		w.Steps = append(w.Steps, WireStep{Type: st.Type, Args: st.Args, Force: st.Force, FilesHash: st.FilesHash, Expand: st.Expand})
	}
	return w
}

// Spec is w as the builder takes it.
func (w WireSpec) Spec() builder.Spec {
	s := builder.Spec{FromImage: w.FromImage, FromTemplate: w.FromTemplate, StartCmd: w.StartCmd, ReadyCmd: w.ReadyCmd, Force: w.Force, Team: w.Team}
	for _, st := range w.Steps {
		s.Steps = append(s.Steps, builder.Step{Type: st.Type, Args: st.Args, Force: st.Force, FilesHash: st.FilesHash, Expand: st.Expand})
	}
	return s
}

// SourceOf is the control plane's answer for build b of template t,
// held by holders.
func SourceOf(t *templates.Template, b *templates.Build, holders ...Holder) *Source {
	return &Source{Template: TemplateOnWire(t), Build: BuildOnWire(b), Holders: append([]Holder{}, holders...)}
}

// decode reads one JSON body of at most limit bytes into v, refusing a
// field the wire does not know (ErrInvalid).
func decode(r io.Reader, limit int64, v any) error {
	dec := json.NewDecoder(io.LimitReader(r, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrInvalid, err)
	}
	return nil
}
