package apiserver

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/warren-sandbox/warren/internal/envdproto"
	"github.com/warren-sandbox/warren/pkg/client"
)

// envdPort is envd's port in every sandbox; it is never a user port.
const envdPort = envdproto.Port

// checkRouting validates the network fields the edge proxy applies
// (maskRequestHost, httpsPorts).
func checkRouting(n *client.NetworkConfig) error {
	if n.MaskRequestHost != nil {
		h := *n.MaskRequestHost
		// It becomes the Host header the proxy sends to the sandbox: no
		// line breaks (header injection), no path, a host name's length.
		if strings.TrimSpace(h) == "" || len(h) > 270 || strings.ContainsAny(h, " \t\r\n/\x00") {
			return invalid("network.maskRequestHost", "must be a host[:port] (\"${PORT}\" is replaced by the port), got %q", h)
		}
	}
	for i, p := range n.HTTPSPorts {
		if p < 1 || p > 65535 || p == envdPort {
			return invalid(fmt.Sprintf("network.httpsPorts[%d]", i), "must be a port 1-65535 other than %d, got %d", envdPort, p)
		}
	}
	return nil
}

// jsonObject reports whether a raw JSON value is an object.
func jsonObject(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return strings.HasPrefix(s, "{")
}

// given reports whether a raw JSON field was sent with a value.
func given(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}
