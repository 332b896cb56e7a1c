// Package templates is Warren's template catalog: templates with IDs,
// aliases (names) and tags, their builds, and per-build metadata (root
// filesystem location, environment, default user and working directory,
// start and ready commands, CPU and memory defaults).
//
// A Catalog sits on a Store (file-based here, SQL later) and answers the
// questions the rest of Warren asks: Resolve turns "alias[:tag]" or an ID
// into the node.Template a node starts sandboxes from; EnsureBase makes the
// default `base` template from Debian's packages on first start. The build
// engine (internal/builder) creates and finishes builds through the Catalog.
//
// Environment precedence (docs/lifecycle.md §7) lives in one function,
// MergeEnv, used by create, resume and build alike.
package templates

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/warren-sandbox/warren/internal/errdefs"
	"github.com/warren-sandbox/warren/internal/nodeapi"
)

// Well-known names.
const (
	// BaseID is the ID (and alias) of the default template.
	BaseID = "base"
	// DefaultTag is the tag a bare alias resolves to.
	DefaultTag = "default"
	// DefaultUser and DefaultWorkdir are what processes run as and in when
	// a build says nothing else.
	DefaultUser    = "user"
	DefaultWorkdir = "/home/user"
	// DefaultPath is the PATH of a template whose image sets none.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Resource bounds and defaults of a template (E2B's values).
const (
	MinCPU          = 1
	MinMemoryMB     = 128
	DefaultCPU      = 2
	DefaultMemoryMB = 512
	DefaultDiskMB   = 4096
	// DefaultBuildMemoryMB is what a template build without memoryMB
	// gets, as on E2B (the base template keeps DefaultMemoryMB).
	DefaultBuildMemoryMB = 1024
)

// Template is one template of the catalog.
type Template struct {
	ID string `json:"id"`
	// TeamID owns the template; empty for system templates (base).
	TeamID string `json:"teamId"`
	// Aliases are the template's names, unique within its team (see
	// Catalog.Find for how a name is resolved).
	Aliases []string `json:"aliases"`
	Public  bool     `json:"public"`
	// Tags point names to builds; DefaultTag is what a bare alias means.
	Tags      map[string]Tag `json:"tags"`
	CPUCount  int            `json:"cpuCount"`
	MemoryMB  int64          `json:"memoryMB"`
	DiskMB    int64          `json:"diskMB"`
	CreatedAt time.Time      `json:"createdAt"`
	UpdatedAt time.Time      `json:"updatedAt"`
}

// Tag is one tag of a template.
type Tag struct {
	BuildID   string    `json:"buildId"`
	CreatedAt time.Time `json:"createdAt"`
}

// BuildStatus is the state of a build, with E2B's wire names.
type BuildStatus string

// Build states: waiting → building → ready | error.
const (
	BuildWaiting  BuildStatus = "waiting"
	BuildBuilding BuildStatus = "building"
	BuildReady    BuildStatus = "ready"
	BuildError    BuildStatus = "error"
)

// Build is one build of a template and, once ready, everything a node needs
// to start sandboxes from it.
type Build struct {
	ID         string      `json:"id"`
	TemplateID string      `json:"templateId"`
	Status     BuildStatus `json:"status"`
	// Tags are assigned to this build when it becomes ready.
	Tags []string `json:"tags,omitempty"`

	// RootFSTar, when set, is a tar of the root filesystem (the artifact a
	// node unpacks); RootFSDir is the unpacked tree on this machine.
	RootFSTar string `json:"rootfsTar,omitempty"`
	RootFSDir string `json:"rootfsDir,omitempty"`
	// RootFSTarFingerprint identifies the tar's content as the build used
	// it (base builds): a changed tar makes a new base build, and is never
	// unpacked for this one.
	RootFSTarFingerprint *TarFingerprint `json:"rootfsTarFingerprint,omitempty"`
	// Env is the image's ENV merged with the build's ENV steps.
	Env      map[string]string `json:"env,omitempty"`
	User     string            `json:"user"`
	Workdir  string            `json:"workdir"`
	StartCmd string            `json:"startCmd,omitempty"`
	ReadyCmd string            `json:"readyCmd,omitempty"`
	CPUCount int               `json:"cpuCount"`
	MemoryMB int64             `json:"memoryMB"`
	DiskMB   int64             `json:"diskMB"`
	// SnapshotDir, when set, is a memory image taken once the ready
	// command passed (snapshot on ready).
	SnapshotDir string `json:"snapshotDir,omitempty"`
	// NodeID, under `warren api`, is the node that ran the build and
	// holds its artifact.
	NodeID string `json:"nodeId,omitempty"`
	// RootFSSHA256 and RootFSSize identify the root filesystem's artifact
	// as nodes exchange it (internal/nodebuild): a tar whose sha256 a node
	// that pulls it checks before use.
	RootFSSHA256 string `json:"rootfsSha256,omitempty"`
	RootFSSize   int64  `json:"rootfsSize,omitempty"`
	// SnapshotSHA256 and SnapshotSize identify the snapshot on ready's
	// artifact (its memory image and saved writable layer) as nodes
	// exchange it, and SnapshotHost what it was taken with, which a node
	// that pulls it must match to restore it (nodeapi.SnapshotHost).
	SnapshotSHA256 string                `json:"snapshotSha256,omitempty"`
	SnapshotSize   int64                 `json:"snapshotSize,omitempty"`
	SnapshotHost   *nodeapi.SnapshotHost `json:"snapshotHost,omitempty"`
	// EnvdVersion is the envd the template was built with, when known.
	EnvdVersion string `json:"envdVersion,omitempty"`
	// DiskBytes is the disk the build takes, recorded when it ended (its
	// directory when ready, and the layer cache entries it made): what
	// counts against its team's template storage.
	DiskBytes int64 `json:"diskBytes,omitempty"`
	// SandboxSnapshot, when set, makes the build a snapshot of a running
	// sandbox (E2B's POST /sandboxes/{id}/snapshots), recorded from the
	// start of the snapshot: its memory image and layer are that
	// sandbox's, over its template's root filesystem, so its sandboxes
	// start from the snapshot only, never cold (a node that cannot restore
	// it refuses them).
	SandboxSnapshot *SandboxSnapshotOrigin `json:"sandboxSnapshot,omitempty"`
	// Reason tells why a build failed.
	Reason *Reason `json:"reason,omitempty"`

	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// SandboxSnapshotOrigin is where a sandbox snapshot's build comes from.
type SandboxSnapshotOrigin struct {
	SandboxID string    `json:"sandboxID"`
	TeamID    string    `json:"teamID"`
	CreatedAt time.Time `json:"createdAt"`
	// VolumePaths are where the sandbox mounted volumes, sorted: their
	// content is not in the snapshot, and its sandboxes mount volumes at
	// exactly these paths (docs/volumes.md).
	VolumePaths []string `json:"volumePaths,omitempty"`
}

// Reason is why a build failed: the message and the step it failed at.
type Reason struct {
	Message string `json:"message"`
	Step    string `json:"step,omitempty"`
}

// LogLevel is a build log level with E2B's wire names.
type LogLevel string

// Log levels.
const (
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

// LogEntry is one line of a build's log.
type LogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     LogLevel  `json:"level"`
	Message   string    `json:"message"`
	// Step names the build step ("base", "1", ..., "finalize") if any.
	Step string `json:"step,omitempty"`
}

// Store persists templates, builds and build logs. Implementations are
// safe for concurrent use; updates through UpdateTemplate and UpdateBuild
// are atomic read-modify-writes. Errors: errdefs.ErrNotFound for a missing
// object, errdefs.ErrAlreadyExists for a taken ID or alias.
type Store interface {
	// CreateTemplate stores a new template.
	CreateTemplate(ctx context.Context, t *Template) error
	// UpdateTemplate applies fn to the stored template and stores the
	// result, unless fn fails.
	UpdateTemplate(ctx context.Context, id string, fn func(*Template) error) (*Template, error)
	GetTemplate(ctx context.Context, id string) (*Template, error)
	// TemplateByAlias finds the template of team teamID ("" for system
	// templates) that has alias among its Aliases. Aliases are unique per
	// team, not across teams.
	TemplateByAlias(ctx context.Context, teamID, alias string) (*Template, error)
	ListTemplates(ctx context.Context) ([]*Template, error)
	// DeleteTemplate removes the template with its builds and their logs.
	DeleteTemplate(ctx context.Context, id string) error

	CreateBuild(ctx context.Context, b *Build) error
	UpdateBuild(ctx context.Context, id string, fn func(*Build) error) (*Build, error)
	// FinishBuild applies fnBuild to the build and fnTemplate to its
	// template as one change: after a crash both are stored or neither,
	// and a failing fn stores neither.
	FinishBuild(ctx context.Context, id string, fnBuild func(*Build) error, fnTemplate func(*Template) error) (*Build, error)
	GetBuild(ctx context.Context, id string) (*Build, error)
	// ListBuilds returns a template's builds, oldest first.
	ListBuilds(ctx context.Context, templateID string) ([]*Build, error)

	// AppendLogs adds entries to a build's log.
	AppendLogs(ctx context.Context, buildID string, entries ...LogEntry) error
	// Logs returns a build's log entries from offset on (0 is the first).
	Logs(ctx context.Context, buildID string, offset int) ([]LogEntry, error)
}

// MergeEnv is the one place where environment precedence is decided
// (docs/lifecycle.md §7): the template's environment (image ENV and build
// ENV steps), overridden by the create-time envVars, overridden by a
// command's own envs. Used by create, resume and build. Any argument may be
// nil; the result is a new map.
func MergeEnv(template, create, command map[string]string) map[string]string {
	out := make(map[string]string, len(template)+len(create)+len(command))
	maps.Copy(out, template)
	maps.Copy(out, create)
	maps.Copy(out, command)
	return out
}

// EnvList renders env as sorted KEY=VALUE strings (process environments).
func EnvList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// ParseRef splits "alias:tag" (or "id:tag") into its name and tag; the tag
// is DefaultTag when absent.
func ParseRef(ref string) (name, tag string) {
	name, tag, ok := strings.Cut(ref, ":")
	if !ok || tag == "" {
		tag = DefaultTag
	}
	return name, tag
}

// ReservedNames are template names only the operator's system templates
// may have: a team can neither take them nor shadow them.
var ReservedNames = []string{BaseID, "code-interpreter-v1", "mcp-gateway"}

// Reserved reports whether name belongs to the operator.
func Reserved(name string) bool { return slices.Contains(ReservedNames, name) }

// ValidateAlias checks a template name: lowercase letters, digits, "-",
// "_" and ".", at most 128 characters, optionally "namespace/name".
func ValidateAlias(alias string) error {
	if alias == "" || len(alias) > 128 {
		return errdefs.Publicf(errdefs.ErrInvalid, "template name %q: must be 1 to 128 characters", alias)
	}
	for _, r := range alias {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == '/':
		default:
			return errdefs.Publicf(errdefs.ErrInvalid, "template name %q: only lowercase letters, digits, '-', '_', '.' and '/' are allowed", alias)
		}
	}
	return nil
}

// Limits are a team's upper bounds for template resources; zero means no
// bound.
type Limits struct {
	MaxCPU      int
	MaxMemoryMB int64
}

// ValidateResources checks requested CPU and memory with E2B's messages
// (a nil pointer means "not given") and returns the values to use,
// defaults filled in (DefaultCPU and DefaultBuildMemoryMB, lowered to the
// team's limits).
func ValidateResources(cpu *int, memoryMB *int64, lim Limits) (int, int64, error) {
	c, m := DefaultCPU, int64(DefaultBuildMemoryMB)
	if lim.MaxCPU > 0 {
		c = min(c, lim.MaxCPU)
	}
	if lim.MaxMemoryMB > 0 {
		m = min(m, lim.MaxMemoryMB)
	}
	if cpu != nil {
		c = *cpu
		if c < MinCPU {
			return 0, 0, invalidf("CPU count must be at least %d", MinCPU)
		}
		if lim.MaxCPU > 0 && c > lim.MaxCPU {
			return 0, 0, invalidf("CPU count can't be higher than %d (ask the operator to raise the team's limit)", lim.MaxCPU)
		}
	}
	if memoryMB != nil {
		m = *memoryMB
		if m < MinMemoryMB {
			return 0, 0, invalidf("Memory must be at least %d MiB", MinMemoryMB)
		}
		if m%2 != 0 {
			return 0, 0, invalidf("Memory must be divisible by 2")
		}
		if lim.MaxMemoryMB > 0 && m > lim.MaxMemoryMB {
			return 0, 0, invalidf("Memory can't be higher than %d MiB (ask the operator to raise the team's limit)", lim.MaxMemoryMB)
		}
	}
	return c, m, nil
}

// CheckID refuses an ID no template or build can have: empty, "." or
// "..", containing a slash, or over 128 bytes. IDs come from clients and
// peers; one that passes names no file but its own (it is a single path
// element) and no other object. kind names the object in the error.
func CheckID(kind, id string) error {
	if id == "" || id == "." || id == ".." || len(id) > 128 || strings.ContainsAny(id, "/\\\x00") {
		return errdefs.Publicf(errdefs.ErrInvalid, "%s %q: bad ID", kind, id)
	}
	return nil
}

// NewTemplateID returns a new random template ID (20 lowercase
// alphanumerics, like E2B's).
func NewTemplateID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// NewBuildID returns a new random build ID (a UUID, like E2B's).
func NewBuildID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// clientError is an error whose message is meant for the client as it is
// (E2B's wording) and whose class is errdefs.ErrInvalid.
type clientError struct{ msg string }

func (e *clientError) Error() string        { return e.msg }
func (e *clientError) Is(target error) bool { return target == errdefs.ErrInvalid }

// PublicMessage is the message, E2B's wording (errdefs.Public).
func (e *clientError) PublicMessage() string { return e.msg }

func invalidf(format string, args ...any) error {
	return &clientError{msg: fmt.Sprintf(format, args...)}
}
