// Package envd is the daemon inside every Warren sandbox, wire-compatible
// with E2B's envd 0.6.x: the process.Process and filesystem.Filesystem
// Connect services (Connect protocol, JSON and binary codecs, gRPC and
// gRPC-Web too) and the HTTP routes /health, /metrics, /envs, /init and
// /files. Its subpackages each provide one part: process, filesystem,
// files (/files), auth, identity (users and paths), state (what /init
// sets), metrics, portfwd, reaper.
//
// # Contract with the node agent
//
//   - envd runs as the sandbox's init (PID 1). The binary is mounted
//     read-only at /.warren/envd and started as
//     `/.warren/envd --port 49983 --init-token-sha256 <hex>`. As PID 1 it
//     reaps orphaned processes (package reaper) without stealing the exit
//     status of the processes it started. It also runs as an ordinary
//     process (tests), then waiting only for its own children.
//   - It listens on 0.0.0.0:<port> (--listen to change the address); the
//     node reaches it on the sandbox's IP.
//   - The environment envd is started with is the template's environment:
//     every process inherits it, overlaid by /init's envVars, overlaid by
//     the request's envs (request wins).
//   - POST /init takes the JSON body of upstream's envd.yaml (envVars,
//     accessToken, defaultUser, defaultWorkdir, timestamp, caBundle;
//     volumeMounts, hyperloopIP and lifecycleID are accepted and ignored)
//     and answers 204. caBundle's certificates are appended, once, to the
//     system CA bundle (/etc/ssl/certs/ca-certificates.crt) when envd is
//     PID 1. With --init-token-sha256 it requires the header
//     X-Warren-Init-Token whose sha256 (hex) equals the flag, compared in
//     constant time; otherwise 401. Without the flag, upstream's rule holds:
//     open until an access token is set, then that token is required in
//     X-Access-Token. /init may be called again at any time (after a
//     snapshot restore: new token, env, clock); applying the same body twice
//     is the same as once. Env vars merge key by key; an empty accessToken
//     removes the token. The clock is set from timestamp only when envd is
//     PID 1 (never on a host) and is more than a second off.
//   - GET /envs answers the /init environment variables with header
//     X-Warren-Init-Id: a random ID renewed at start and at every /init
//     (so after every restore, in every copy of an image). Warren's code
//     interpreter compares it to notice a restore and reseed its kernels.
//   - The default user, when /init names none, is `user` if it exists,
//     else root; the default working directory is that user's home.
//   - GET /health answers 204 with header X-Warren-Mem-Used: the guest's
//     MemTotal - MemAvailable in bytes (omitted when unreadable).
//     GET /metrics answers the contract's JSON (mem_used = MemTotal -
//     MemAvailable).
//   - Services listening only on loopback inside the sandbox are forwarded
//     to its non-loopback addresses (package portfwd); envd's own port is
//     excluded. --no-port-forward turns this off.
//   - Version is the envd version to report to the SDK (envdVersion).
//
// # Auth
//
// When an access token is set, every route but GET /health, /files (token
// or signed URL) and /init (node token) requires X-Access-Token; the
// comparison is constant-time. Requests act as the user named by Basic
// auth (Connect RPCs) or the `username` query parameter (/files), else the
// default user; an unknown user is refused (unauthenticated / 401).
package envd

import "github.com/warren-sandbox/warren/internal/envdproto"

// Version is the E2B envd protocol version this envd implements (see
// envdproto.Version, its one source).
const Version = envdproto.Version
