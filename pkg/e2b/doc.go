// Package e2b is a Go SDK for E2B-compatible sandboxes: Warren's, and
// E2B's cloud. It covers what the JS and Python SDKs do for sandboxes
// (Create, Connect, List, pause, resume, fork, metrics, snapshots),
// commands (Commands, background CommandHandle), files (Files, Watch),
// terminals (Pty) and template builds (BuildTemplate). The REST calls go
// through pkg/client, envd's process and filesystem services through the
// Connect clients generated in api/envd (JSON codec, as the other SDKs),
// and file contents through envd's /files route. It is versioned with
// the Warren module.
//
// Configuration comes from options or, when an option is unset, from the
// environment as in the other SDKs: E2B_API_KEY, E2B_API_URL,
// E2B_SANDBOX_URL, E2B_DOMAIN and E2B_DEBUG. Every call takes a
// context.Context first.
//
//	sb, err := e2b.Create(ctx, e2b.CreateOptions{Template: "base"})
//	if err != nil { ... }
//	defer sb.Kill(context.Background())
//	res, err := sb.Commands.Run(ctx, `python3 -c "print(6*7)"`, e2b.RunOptions{})
//	fmt.Print(res.Stdout) // 42
//
// A command that exits non-zero returns a *CommandExitError together with
// its result; envd's errors come back as *connect.Error values wrapped
// with the object they concern (errors.Is(err, ErrNotFound) for a missing
// file or process).
package e2b
