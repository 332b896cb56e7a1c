package client

import (
	"encoding/json"
	"time"
)

// The wire types of the E2B-compatible REST API. Field names follow the
// E2B OpenAPI specification; Warren's server encodes and decodes these same
// types.

// Error is the body of every error response. Code equals the HTTP status.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// NewSandbox is the body of POST /sandboxes and POST /v2/sandboxes.
type NewSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int              `json:"timeout,omitempty"`
	AutoPause           *bool             `json:"autoPause,omitempty"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory,omitempty"`
	AutoResume          *AutoResume       `json:"autoResume,omitempty"`
	Secure              *bool             `json:"secure,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Network             *NetworkConfig    `json:"network,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	Mcp                 json.RawMessage   `json:"mcp,omitempty"`
	IAM                 json.RawMessage   `json:"iam,omitempty"`
	VolumeMounts        []VolumeMount     `json:"volumeMounts,omitempty"`
}

// AutoResume configures waking a paused sandbox on traffic.
type AutoResume struct {
	Enabled bool `json:"enabled"`
}

// NetworkConfig is a sandbox's network configuration.
type NetworkConfig struct {
	AllowPublicTraffic *bool                      `json:"allowPublicTraffic,omitempty"`
	AllowOut           []string                   `json:"allowOut,omitempty"`
	DenyOut            []string                   `json:"denyOut,omitempty"`
	EgressProxy        json.RawMessage            `json:"egressProxy,omitempty"`
	MaskRequestHost    *string                    `json:"maskRequestHost,omitempty"`
	Rules              map[string]json.RawMessage `json:"rules,omitempty"`
	HTTPSPorts         []int                      `json:"httpsPorts,omitempty"`
}

// NetworkUpdate is the body of PUT /sandboxes/{id}/network.
type NetworkUpdate struct {
	AllowOut            []string                   `json:"allowOut,omitempty"`
	DenyOut             []string                   `json:"denyOut,omitempty"`
	EgressProxy         json.RawMessage            `json:"egressProxy,omitempty"`
	Rules               map[string]json.RawMessage `json:"rules,omitempty"`
	AllowInternetAccess *bool                      `json:"allow_internet_access,omitempty"`
}

// VolumeMount names a volume mounted into a sandbox.
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// Sandbox is the answer to create, connect and resume.
type Sandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// Lifecycle is a sandbox's lifecycle policy.
type Lifecycle struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"` // kill | pause
}

// ListedSandbox is one entry of a sandbox list.
type ListedSandbox struct {
	TemplateID   string            `json:"templateID"`
	Alias        string            `json:"alias,omitempty"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int64             `json:"memoryMB"`
	DiskSizeMB   int64             `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []VolumeMount     `json:"volumeMounts,omitempty"`
}

// SandboxDetail is the answer to GET /sandboxes/{id}.
type SandboxDetail struct {
	ListedSandbox
	EnvdAccessToken     string         `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool          `json:"allowInternetAccess"`
	Domain              *string        `json:"domain"`
	Network             *NetworkConfig `json:"network,omitempty"`
	Lifecycle           *Lifecycle     `json:"lifecycle,omitempty"`
	// Health is Warren's addition: the node watchdog's view of a running
	// sandbox's envd (healthy, unhealthy or unknown); absent when paused.
	Health string `json:"health,omitempty"`
}

// TimeoutRequest is the body of POST /sandboxes/{id}/timeout.
type TimeoutRequest struct {
	Timeout int `json:"timeout"`
}

// RefreshRequest is the body of POST /sandboxes/{id}/refreshes.
type RefreshRequest struct {
	Duration *int `json:"duration,omitempty"`
}

// ConnectRequest is the body of POST /sandboxes/{id}/connect.
type ConnectRequest struct {
	Timeout *int  `json:"timeout,omitempty"`
	Memory  *bool `json:"memory,omitempty"`
}

// ResumeRequest is the body of the deprecated POST /sandboxes/{id}/resume.
type ResumeRequest struct {
	Timeout   *int  `json:"timeout,omitempty"`
	AutoPause *bool `json:"autoPause,omitempty"`
	Memory    *bool `json:"memory,omitempty"`
}

// PauseRequest is the body of POST /sandboxes/{id}/pause.
type PauseRequest struct {
	Memory *bool `json:"memory,omitempty"`
}

// ForkRequest is the body of POST /sandboxes/{id}/fork.
type ForkRequest struct {
	Timeout *int `json:"timeout,omitempty"`
	Count   *int `json:"count,omitempty"`
}

// ForkResult is one entry of a fork answer.
type ForkResult struct {
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	Error   *Error   `json:"error,omitempty"`
}

// Metric is one resource usage sample of a sandbox.
type Metric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       uint64    `json:"memUsed"`
	MemTotal      uint64    `json:"memTotal"`
	MemCache      uint64    `json:"memCache"`
	DiskUsed      uint64    `json:"diskUsed"`
	DiskTotal     uint64    `json:"diskTotal"`
}

// SandboxesWithMetrics is the answer to GET /sandboxes/metrics.
type SandboxesWithMetrics struct {
	Sandboxes map[string]Metric `json:"sandboxes"`
}

// LogLine is one entry of the v1 logs answer.
type LogLine struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

// LogEntry is one structured log entry.
type LogEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// SandboxLogs is the answer to GET /sandboxes/{id}/logs.
type SandboxLogs struct {
	Logs       []LogLine  `json:"logs"`
	LogEntries []LogEntry `json:"logEntries"`
}

// SandboxLogsV2 is the answer to GET /v2/sandboxes/{id}/logs.
type SandboxLogsV2 struct {
	Logs []LogEntry `json:"logs"`
}

// Secret is a team's secret as the API shows it: never its value.
type Secret struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
}

// NewSecret is the body of POST /secrets.
type NewSecret struct {
	Name     string            `json:"name"`
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// SecretUpdate is the body of POST /secrets/{secretID}: a new value and,
// when given, new metadata.
type SecretUpdate struct {
	Value    string            `json:"value"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// EgressEntry is one line of a sandbox's egress log (GET
// /sandboxes/{id}/egress): a connection through the egress proxy or a DNS
// question.
type EgressEntry struct {
	Timestamp  time.Time `json:"timestamp"`
	Proto      string    `json:"proto"`
	Host       string    `json:"host,omitempty"`
	Addr       string    `json:"addr,omitempty"`
	Port       int       `json:"port,omitempty"`
	Decision   string    `json:"decision"`
	Reason     string    `json:"reason"`
	BytesOut   int64     `json:"bytesOut"`
	BytesIn    int64     `json:"bytesIn"`
	DurationMs int64     `json:"durationMs"`
	Open       bool      `json:"open,omitempty"`
}
