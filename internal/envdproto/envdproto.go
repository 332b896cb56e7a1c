// Package envdproto holds what envd's callers (the node agent, the control
// plane, the proxy) share of its wire protocol without linking the envd
// daemon: its protocol version.
package envdproto

// Version is the E2B envd protocol version Warren's envd implements. The
// behaviours the E2B SDKs gate on up to 0.6.4 (closeStdin, octet-stream
// and gzip uploads, file metadata, includeEntry, allowNetworkMounts) are
// all implemented; the later 0.6.x additions (/freeze, /unfreeze,
// /collapse, /fsfreeze, /files/compose, volume mounts) are not, so 0.6.4
// is reported rather than upstream's newest.
const Version = "0.6.4"
