package builder

import "github.com/warren-sandbox/warren/internal/node"

// The node agent is the collector's TemplateUsers. The guard is in a test
// so that the builder (which the control plane imports) links no agent.
var _ TemplateUsers = (*node.Agent)(nil)
